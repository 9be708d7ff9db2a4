-- The second stage's weights and zone thresholds fitted to this forum by `citebot calibrate` (issue 37).
-- One row per run, kept as history; at most one `active` row per model set (the recall model, the
-- lexical recipe and the second model: worker/retrieval/stage.py model_set_id), which the worker uses
-- instead of the weights shipped in worker/retrieval/stage_weights.json. A run that is refused (its test
-- half figures below the active ones', too few solved topics) is recorded with `active = false` and why.
CREATE TABLE stage_calibrations (
    id              bigserial        PRIMARY KEY,
    model_set       text             NOT NULL,
    fitted_at       timestamptz      NOT NULL DEFAULT now(),
    active          boolean          NOT NULL DEFAULT false,
    decision        text             NOT NULL,  -- 'activated', 'forced', 'kept_active', 'too_little_data'
    model           jsonb,                      -- StageModel.as_dict(); NULL when nothing was fitted
    abstain_below   double precision,
    weak_below      double precision,
    source          text             NOT NULL,  -- where the solved topics came from ('file:<path>', 'api', 'db')
    questions       jsonb            NOT NULL,  -- counts: solved topics, questions per half, out of domain
    figures         jsonb            NOT NULL,  -- the test half's figures, calibrated and shipped, with intervals
    CHECK (NOT active OR (model IS NOT NULL AND abstain_below IS NOT NULL AND weak_below IS NOT NULL))
);
CREATE UNIQUE INDEX stage_calibrations_active_idx ON stage_calibrations (model_set) WHERE active;
