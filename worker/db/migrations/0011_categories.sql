-- Categories as the forum last described them (issue 32), replacing `restricted_categories` (a deny
-- list: a category it lacked was public, so one missing from a partial list, or created after the last
-- backfill, was cited) and `category_names`. A post is citable only when its category is here with
-- `read_restricted = false`, and so is each of its ancestors (`citable_categories`): a category the
-- forum has not described is restricted (fail closed). Who wrote a row is `seen_by` ('db', 'api',
-- 'file:<path>', 'event', 'lookup', 'migration'); `read_restricted` NULL means the name is known but
-- not the permissions (carried over from `category_names`): not citable.
CREATE TABLE categories (
    category_id         bigint      PRIMARY KEY,
    name                text,
    parent_category_id  bigint,
    read_restricted     boolean,
    seen_by             text        NOT NULL,
    seen_at             timestamptz NOT NULL DEFAULT now()
);

-- What the old tables knew: the names (permissions unknown) and the categories known restricted.
-- Nothing becomes citable here: the worker reads the forum's categories at start-up, and every backfill
-- run and category event records them.
INSERT INTO categories (category_id, name, read_restricted, seen_by)
SELECT n.category_id, n.name, CASE WHEN r.category_id IS NOT NULL THEN true END, 'migration'
FROM category_names n LEFT JOIN restricted_categories r USING (category_id);
INSERT INTO categories (category_id, read_restricted, seen_by)
SELECT category_id, true, 'migration' FROM restricted_categories
ON CONFLICT (category_id) DO NOTHING;
DROP TABLE category_names;
DROP TABLE restricted_categories;

-- The allow-list every eligibility query reads once per statement (an InitPlan: `category_id =
-- ANY(ARRAY(SELECT category_id FROM citable_categories))`). Discourse nests categories at most three
-- deep (`max_category_nesting`), so two joins reach every ancestor; an ancestor the table lacks makes
-- its descendants uncitable.
CREATE VIEW citable_categories AS
SELECT c.category_id
FROM categories c
LEFT JOIN categories p ON p.category_id = c.parent_category_id
LEFT JOIN categories g ON g.category_id = p.parent_category_id
WHERE c.read_restricted = false
  AND (c.parent_category_id IS NULL OR p.read_restricted = false)
  AND (p.parent_category_id IS NULL OR g.read_restricted = false);
