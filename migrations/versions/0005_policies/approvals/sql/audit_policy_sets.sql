-- What auditors read of the published policy sets: all of it.
CREATE OR REPLACE VIEW audit_policy_sets AS
 SELECT policy_sets.version,
    policy_sets.set_hash,
    policy_sets.mode,
    policy_sets.policies,
    policy_sets.policy_ids,
    policy_sets.tools,
    policy_sets.timezone,
    policy_sets.published_by,
    policy_sets.published_at,
    policy_sets.signature
   FROM policy_sets;
