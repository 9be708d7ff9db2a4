-- What `citebot calibrate` has already collected, saved as it goes so that an interrupted run is
-- continued by the same command (worker/calibration/work.py). One row per calibration question and
-- model set: the second stage's candidates for that question and their features. A row is reused only
-- for the same question (`question`: a hash of its text, gold posts, hidden posts and kind) under the
-- same conditions (`context`: a hash of the model set, the index's identity in index_meta, the
-- retrieval settings the candidates depend on and the feature list); the run deletes the rows of its
-- model set that do not match, and all of them once it has recorded its outcome in stage_calibrations.
CREATE TABLE calibration_work (
    model_set    text        NOT NULL,
    question     text        NOT NULL,  -- hash of the question (worker/calibration/work.py question_key)
    context      text        NOT NULL,  -- hash of what else the candidates depend on (context_key)
    question_id  text        NOT NULL,  -- e.g. 'topic-123', 'topic-123/short', 'ood-en-7' (for reading)
    candidates   jsonb       NOT NULL,  -- {"features": [...], "rows": [[post, topic, label, gold_topic, [x...]]]}
    saved_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_set, question)
);
