DELETE FROM event_rights
WHERE type_pattern = 'approval.decided' AND role = 'signoff_app' AND when_field = 'self_confirmed';
