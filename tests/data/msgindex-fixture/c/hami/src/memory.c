CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
    LOG_INFO("into cuMemAllocing_v2 dptr=%p bytesize=%ld",dptr,bytesize);
    if (oom_check(dev, bytesize)) {
        LOG_ERROR("Device %d OOM %lu / %lu", dev, usage, limit);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    LOG_WARN("get_current_device_memory_limit: limit not set for device %d", dev);
    return CUDA_SUCCESS;
}
