#include "socket.h"

static ncclResult_t socketProgressOpt(int op, struct ncclSocket* sock, void* ptr, int size, int* offset, int block, int* closed) {
  int bytes = 0;
  if (bytes == -1) {
    if (errno != EINTR && errno != EWOULDBLOCK && errno != EAGAIN) {
      WARN("socketProgressOpt: Call to %s %s failed : %s", (op == NCCL_SOCKET_RECV ? "recv from" : "send to"),
           ncclSocketToString(&sock->addr, line), strerror(errno));
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

ncclResult_t ncclSocketConnect(struct ncclSocket* sock) {
  // adjacent literals over two lines, a PRIx64 macro, an escaped quote and a %% sign
  INFO(NCCL_INIT|NCCL_NET, "Connecting to %s (magic 0x%" PRIx64 ") "
       "with timeout %ld ms, \"retry\" at 100%%", ncclSocketToString(&sock->addr, line), sock->magic, timeout);
  if (sock->state == ncclSocketStateError) {
    WARN("Net : Connect to %s failed : %s", ncclSocketToString(&sock->addr, line), strerror(errno));
  }
  fprintf(stderr, "NCCL socket %d: size %zu, ratio %.2f\n", sock->fd, sz, r);
  fprintf(logFile, "this goes to a file, not stderr %d\n", 1);
  fprintf(stderr, "%s: %d\n", name, code);
  return ncclSuccess;
}

// the shape of NCCL's ncclGetErrorString (src/init.cc)
const char* ncclGetErrorString(ncclResult_t code) {
  switch (code) {
    case ncclSuccess                : return "no error";
    case ncclUnhandledCudaError     : return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclRemoteError            : return "remote process exited or there was a network error";
    default                         : return "unknown result code";
  }
}
