"""The TVM backend: CPU and CUDA conv2d templates (TVM 0.27 code generation), the TVM RPC runner,
lowered-TIR features, the MetaSchedule driver, and exported shared libraries."""
