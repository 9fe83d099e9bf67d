"""Boards reached and served: TVM RPC processes here, what runs on a board, and how edgetune gets there.

- RPC here: :mod:`~toolkit.rpc.tracker` (tracker and server processes, the tracker's view of its boards),
  :mod:`~toolkit.rpc.service` (the user's long-running tracker);
- on the board: :mod:`~toolkit.rpc.agent` (the RPC server with edgetune's functions),
  :mod:`~toolkit.rpc.vta_driver` (the VTA FPGA register-level driver);
- reaching a board: :mod:`~toolkit.rpc.ssh`, :mod:`~toolkit.rpc.tunnel`, :mod:`~toolkit.rpc.serial_console`;
- setting one up and watching it: :mod:`~toolkit.rpc.provision`, :mod:`~toolkit.rpc.agent_control`,
  :mod:`~toolkit.rpc.board_check`, :mod:`~toolkit.rpc.board_status`;
- bookkeeping: :mod:`~toolkit.state` (state files), :mod:`~toolkit.procs` (who a stored pid is),
  :mod:`~toolkit.rpc.guard` (a process group tied to its owner).
"""
