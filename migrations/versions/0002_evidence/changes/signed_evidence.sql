-- Whatever names a person is signed by the reviewer side: a reviewer login's decisions,
-- cancellations, grants, resolutions and reveals must carry their `signature` object.
UPDATE event_rights SET when_field = 'signature'
    WHERE role = 'signoff_reviewer' AND when_field = ''
      AND type_pattern IN ('approval.decided', 'approval.cancelled', 'approval.granted',
                           'call.resolved', 'ledger.revealed');
