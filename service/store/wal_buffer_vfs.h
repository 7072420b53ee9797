// A SQLite VFS over "unix" that hands a write transaction's WAL frames to the kernel in one write
// instead of two per frame (issue 29: the store writer's ~12.6 pwrite64 calls a one-request job,
// ~6 % of agentqd's CPU on a paravirtualized host where every syscall exits to the hypervisor).
//
// The WAL file collects contiguous appends in a buffer and writes them (pieces under 128 KiB)
// before anything that needs them in the file: xSync (a commit's: the fdatasync that follows covers
// the same bytes as before), xRead, xFileSize, xTruncate, xFileControl, a write that is not an
// append, the close, 4 MiB held; and, through the database file's xShmLock, before the connection
// releases the WAL's write lock. Every other file is unix's, unchanged.
//
// Why it is as durable and as crash-consistent as unix (sqlite's wal.c, walFrames): a commit's
// frames are written, the WAL synced (synchronous=FULL), and only then added to the wal-index,
// which is the only way another connection or process finds a frame; recovery after a crash takes
// frames up to the last valid commit frame, and unix promises nothing about bytes written before a
// sync either. Frames of a transaction that spills before its commit are read back only by their
// own connection (xRead, which flushes first). After a ROLLBACK of such a transaction, frames still
// held are flushed while the write lock is still held (where unix would have written them), so the
// buffer is empty whenever this connection does not hold the write lock: no other connection's
// frames can be overwritten later by held bytes.
// NOTE: needs synchronous FULL or EXTRA on the connection that writes through it: under NORMAL a
// commit has no xSync, and its frames would reach the wal-index while held. conn sets FULL before
// any write.
#pragma once

#include <cstdint>

namespace agentq::store {

// Registers the VFS once (thread-safe; not the default VFS) and returns its name for
// sqlite3_open_v2, or nullptr if SQLite has no "unix" VFS to wrap.
const char* wal_buffer_vfs_name();

// The same VFS over another registered one (tests: a VFS that checks what reaches it), registered
// under name (a string that outlives the process's use of SQLite); nullptr if base_name is unknown.
const char* wal_buffer_vfs_over(const char* base_name, const char* name);

// For tests: the bytes held by every WAL file open through the VFS now, and the writes handed to
// unix so far (each piece one call).
struct wal_buffer_vfs_counts {
  int64_t n_held_bytes = 0, n_writes = 0, n_flushes = 0;
};
wal_buffer_vfs_counts wal_buffer_vfs_stats();

}  // namespace agentq::store
