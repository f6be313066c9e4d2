namespace c10d {

// the shapes of torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp
bool ProcessGroupNCCL::WorkNCCL::checkTimeout(
    std::optional<std::chrono::milliseconds> timeout) {
  auto currentTimepoint = std::chrono::steady_clock::now();
  auto timeElapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      currentTimepoint - workStartTime_);
  std::string exceptionMsg = c10::str(
      logPrefix(),
      "Watchdog caught collective operation timeout: ",
      *this,
      " ran for ",
      timeElapsed.count(),
      " milliseconds before timing out.");

  LOG(ERROR) << exceptionMsg;
  return true;
}

void ProcessGroupNCCL::abortCommsFromMap(int rank) {
  std::ostringstream oss;
  oss << "Some NCCL operations have failed or timed out. Due to the "
      << "asynchronous nature of CUDA kernels, subsequent GPU operations "
      << "might run on corrupted/incomplete data.";
  LOG(ERROR) << logPrefix() << oss.str();
  LOG(INFO) << "this INFO line is below warning level";
  LOG(WARNING) << logPrefix() << "Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=" << size;
  TORCH_CHECK(rank >= 0);
  TORCH_CHECK(
      rank < size_,
      "Invalid rank ", rank,
      " for a group of size ", size_, "\t(tab)");
  TORCH_CHECK_WITH(DistBackendError, false, "NCCL communicator was aborted on rank ", rank_, ".");
  C10D_THROW_ERROR(DistBackendError, c10::str("Backend ", name, " is not available"));
  TORCH_INTERNAL_ASSERT(comm != nullptr, "comm is null for device ", device);
  TORCH_WARN_ONCE("An unbatched P2P op (send/recv) was called on this ProcessGroup with size ", size_, ".");
  C10D_WARNING("The server socket on {} has timed out, will retry.", addr);
  throw std::runtime_error("Failed to open " + path + ": errno " + std::to_string(errno));
  throw std::runtime_error(msg_from_nowhere);
}

} // namespace c10d
