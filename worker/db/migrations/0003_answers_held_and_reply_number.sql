-- Discourse fidelity (issue 15).
-- A reply that Discourse holds for review (POST /posts.json answers {"action": "enqueued"}, no post)
-- ends in its own final state, never retried.
ALTER TABLE answers DROP CONSTRAINT IF EXISTS answers_state_check;
ALTER TABLE answers ADD CONSTRAINT answers_state_check CHECK (state IN
    ('queued', 'retrieved', 'generated', 'posted', 'abstained', 'refused', 'failed', 'skipped',
     'held_for_review'));
-- Where the bot's reply sits in its topic, so that a member's reply to it (reply_to_post_number, with
-- or without reply_to_user, which Discourse leaves out of a reply that quotes) is recognised.
ALTER TABLE answers ADD COLUMN reply_post_number integer;
CREATE INDEX answers_reply_number_idx ON answers (topic_id, reply_post_number)
    WHERE reply_post_number IS NOT NULL;
