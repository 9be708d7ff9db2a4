-- What `citebot calibrate` has read of the forum so far, saved after each batch the source yields so
-- that a run stopped while reading continues from there (worker/calibration/read.py). One row per
-- source (its key: 'db', 'api', 'file:<path>'), whatever the model set: the read does not depend on
-- the models. Only what the questions are built from is kept: each topic's opening post (its HTML)
-- and the ids of its accepted answers. A run deletes its source's row once it ends, with --restart,
-- or when the read began more than READ_MAX_AGE ago; a run saves only into the row it began or
-- continued (started_at), so two runs of one source never mix their reads.
CREATE TABLE calibration_read (
    source      text        PRIMARY KEY,
    cursor      bigint,                              -- the last saved batch's resume token (SourceBatch.cursor)
    done        boolean     NOT NULL DEFAULT false,  -- the source was read to its end
    posts_read  bigint      NOT NULL DEFAULT 0,      -- posts the read has walked (for the log)
    requests    bigint,                              -- API requests the read has made (--source api)
    started_at  timestamptz NOT NULL DEFAULT now(),
    saved_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE calibration_read_post (
    source       text    NOT NULL REFERENCES calibration_read (source) ON DELETE CASCADE,
    post_id      bigint  NOT NULL,
    topic_id     bigint  NOT NULL,
    post_number  integer NOT NULL,  -- 1: the opening post; otherwise an accepted answer
    cooked       text,              -- the opening post's HTML; null for an accepted answer
    PRIMARY KEY (source, post_id)
);
