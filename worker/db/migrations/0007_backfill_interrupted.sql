-- A backfill stopped by Ctrl-C or SIGTERM is recorded as 'interrupted', not 'failed' (issue 16): it saved
-- its finished pages and checkpoint, and the same command resumes it. (0006 is left to issue 18.)
ALTER TABLE backfill_state DROP CONSTRAINT IF EXISTS backfill_state_status_check;
ALTER TABLE backfill_state ADD CONSTRAINT backfill_state_status_check
    CHECK (status IN ('idle', 'running', 'done', 'failed', 'interrupted'));
