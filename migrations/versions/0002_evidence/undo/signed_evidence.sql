UPDATE event_rights SET when_field = ''
    WHERE role = 'signoff_reviewer' AND when_field = 'signature'
      AND type_pattern IN ('approval.decided', 'approval.cancelled', 'approval.granted',
                           'call.resolved', 'ledger.revealed');
