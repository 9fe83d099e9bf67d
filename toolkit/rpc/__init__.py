"""TVM RPC plumbing: tracker and server processes on this machine (see :mod:`toolkit.rpc.tracker`)."""
