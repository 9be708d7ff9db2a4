-- Who may summon the bot (issue 32): a question the summon policy refuses (a PM the bot is not in, a
-- closed or archived topic, a member under the trust level, outside the allowed groups, silenced,
-- suspended or staged) ends in its own final state, with the reason in rule_id ('summon.<reason>').
ALTER TABLE answers DROP CONSTRAINT IF EXISTS answers_state_check;
ALTER TABLE answers ADD CONSTRAINT answers_state_check CHECK (state IN
    ('queued', 'retrieved', 'generated', 'posted', 'abstained', 'refused', 'failed', 'skipped',
     'held_for_review', 'denied'));
