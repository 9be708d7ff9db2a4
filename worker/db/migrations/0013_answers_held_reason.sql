-- No question dropped silently (issue 33, findings 1 and 3).
-- 'held': the flags could not be read yet (no successful read of the site settings since the worker
-- started), so the question is neither answered nor refused; it is retried until they can be read.
ALTER TABLE answers DROP CONSTRAINT IF EXISTS answers_state_check;
ALTER TABLE answers ADD CONSTRAINT answers_state_check CHECK (state IN
    ('queued', 'retrieved', 'generated', 'posted', 'abstained', 'refused', 'failed', 'skipped',
     'held_for_review', 'denied', 'held'));
-- Why a question has no answer, as a short code (worker/answers.py REASONS): what `citebot answers
-- --reason` filters on and citebot_unanswered_total counts. NULL for answered and in-flight rows.
ALTER TABLE answers ADD COLUMN reason text;
-- Rows written before: the policy "no"s, recorded as 'skipped' until now, become 'denied' with their
-- reason, like the summon policy's.
UPDATE answers SET state = 'denied', reason = 'disabled' WHERE state = 'skipped' AND error = 'citebot_enabled is off';
UPDATE answers SET state = 'denied', reason = 'limit.' || substr(error, length('rate limit ') + 1)
    WHERE state = 'skipped' AND error LIKE 'rate limit %';
UPDATE answers SET reason = 'post_gone' WHERE state = 'skipped' AND reason IS NULL;
UPDATE answers SET reason = rule_id WHERE state = 'denied' AND reason IS NULL;
UPDATE answers SET reason = CASE WHEN error LIKE 'transient:%' THEN 'transient_error' ELSE 'permanent_error' END
    WHERE state = 'failed';
UPDATE answers SET reason = 'reply_held_for_review' WHERE state = 'held_for_review';
CREATE INDEX answers_reason_idx ON answers (reason, updated_at) WHERE reason IS NOT NULL;
