"""The AWS emulator: moto server with what moto lacks, by concern (the server itself, its
command line and its timer: sim/moto_lifecycle.py).

- lifecycle.py  lifecycle hooks and their held actions, heartbeats, timeouts, SetInstanceHealth
- zones.py      Availability Zones: where instances launch and which leave, AZRebalance
- refresh.py    instance refresh: Start/Describe/Cancel/Rollback, batches through the hooks
- cfn_shims.py  CloudFormation: what moto's models of the template's resources leave out
- routes.py     the WSGI application: the lock, the fault layer, the /_sim/* routes
"""
