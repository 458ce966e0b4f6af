-- What auditors read of the reviewer directory: all of it.
CREATE OR REPLACE VIEW audit_reviewers AS
 SELECT reviewers.reviewer_id,
    reviewers.groups,
    reviewers.active,
    reviewers.changed_by,
    reviewers.changed_at,
    reviewers.version
   FROM reviewers;
