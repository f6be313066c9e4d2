void rmsnorm(TensorView output, TensorView input, TensorView weight, double eps) {
  CHECK_INPUT(input);
  FLASHINFER_CHECK(input.size(0) == output.size(0), "Batch size mismatch:", input.size(0), "vs", output.size(0));
  FLASHINFER_CHECK(eps > 0);
  TVM_FFI_ICHECK(status == cudaSuccess)
      << "RMSNorm failed with error code " << cudaGetErrorString(status);
  TVM_FFI_ICHECK_EQ(input.ndim(), 2) << "input must be a 2D tensor";
  if (dtype_unknown) {
    TVM_FFI_THROW(ValueError) << "Unsupported dtype: " << dtype;
  }
}
