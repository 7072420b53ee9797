// The WAL-buffering VFS (see wal_buffer_vfs.h): a shim over unix's files, one allocation each
// (our header, then unix's sqlite3_file), every method forwarded; the WAL file's writes held.
#include "store/wal_buffer_vfs.h"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace agentq::store {

namespace {

// NOTE: under 128 KiB: unix's seekAndWrite masks a write's length with 0x1ffff (so a 128 KiB write
// would be one of 0 bytes, reported as SQLITE_FULL).
constexpr int64_t k_piece_bytes = 0x1f000;
constexpr int64_t k_max_held_bytes = int64_t(4) << 20;  // a large transaction's spills: written at this size

struct shim_file {
  sqlite3_file base;   // pMethods: one of methods_by_version
  sqlite3_file* real;  // unix's file, after this header in the same allocation
  bool is_wal = false;
  const char* db_name = nullptr;  // main db: its name; WAL: its database's (the same pointer: the pager's)
  char* buf = nullptr;            // WAL: held bytes, file offsets [off, off + len)
  int64_t cap = 0, len = 0, off = 0;
};

constexpr size_t k_real_offset = (sizeof(shim_file) + 15) / 16 * 16;

sqlite3_io_methods g_methods[4];  // index = iVersion (1..3), as the wrapped file offers
std::mutex g_wals_mu;
std::vector<shim_file*> g_wals;  // WAL files open through the VFS (a main db's xShmLock finds its own)
std::atomic<int64_t> g_held{0}, g_writes{0}, g_flushes{0};

shim_file* as_shim(sqlite3_file* p) {
  return reinterpret_cast<shim_file*>(p);
}
sqlite3_file* real_of(sqlite3_file* p) {
  return as_shim(p)->real;
}

// The held bytes to unix, in pieces; the buffer is empty afterwards whatever the outcome (a failed
// flush is reported by the caller's method; bytes kept would reach the file at some later moment).
int flush(shim_file* f) {
  if (f->len == 0) return SQLITE_OK;
  int rc = SQLITE_OK;
  for (int64_t done = 0; done < f->len && rc == SQLITE_OK;) {
    const int n = int(std::min(k_piece_bytes, f->len - done));
    rc = f->real->pMethods->xWrite(f->real, f->buf + done, n, f->off + done);
    g_writes.fetch_add(1, std::memory_order_relaxed);
    done += n;
  }
  g_held.fetch_sub(f->len, std::memory_order_relaxed);
  g_flushes.fetch_add(1, std::memory_order_relaxed);
  f->len = 0;
  return rc;
}

int flush_then(sqlite3_file* p) {
  return as_shim(p)->is_wal ? flush(as_shim(p)) : SQLITE_OK;
}

// --- io methods ------------------------------------------------------------------------

int x_close(sqlite3_file* p) {
  shim_file* f = as_shim(p);
  int rc = SQLITE_OK;
  if (f->is_wal) {
    rc = flush(f);
    {
      std::lock_guard lock(g_wals_mu);
      g_wals.erase(std::remove(g_wals.begin(), g_wals.end(), f), g_wals.end());
    }
    std::free(f->buf);
    f->buf = nullptr;
  }
  const int rc_close = f->real->pMethods->xClose(f->real);
  return rc != SQLITE_OK ? rc : rc_close;
}

int x_read(sqlite3_file* p, void* out, int n, sqlite3_int64 ofst) {
  if (int rc = flush_then(p); rc != SQLITE_OK) return rc;
  return real_of(p)->pMethods->xRead(real_of(p), out, n, ofst);
}

int x_write(sqlite3_file* p, const void* data, int n, sqlite3_int64 ofst) {
  shim_file* f = as_shim(p);
  if (!f->is_wal) return f->real->pMethods->xWrite(f->real, data, n, ofst);
  // Not an append to what is held (a frame rewritten in place, the header after a restart): what
  // is held goes first, so the file sees the writes in their order.
  if (f->len > 0 && (ofst != f->off + f->len || f->len + n > k_max_held_bytes))
    if (int rc = flush(f); rc != SQLITE_OK) return rc;
  if (f->len + n > f->cap) {
    const int64_t want = std::min(k_max_held_bytes, std::max<int64_t>({f->cap * 2, f->len + n, 256 << 10}));
    char* grown = n <= k_max_held_bytes ? static_cast<char*>(std::realloc(f->buf, size_t(want))) : nullptr;
    if (!grown) {  // past the cap (or no memory): this write as unix would do it
      if (int rc = flush(f); rc != SQLITE_OK) return rc;
      g_writes.fetch_add(1, std::memory_order_relaxed);
      return f->real->pMethods->xWrite(f->real, data, n, ofst);
    }
    f->buf = grown;
    f->cap = want;
  }
  if (f->len == 0) f->off = ofst;
  std::memcpy(f->buf + f->len, data, size_t(n));
  f->len += n;
  g_held.fetch_add(n, std::memory_order_relaxed);
  return SQLITE_OK;
}

int x_truncate(sqlite3_file* p, sqlite3_int64 size) {
  if (int rc = flush_then(p); rc != SQLITE_OK) return rc;
  return real_of(p)->pMethods->xTruncate(real_of(p), size);
}

int x_sync(sqlite3_file* p, int flags) {
  if (int rc = flush_then(p); rc != SQLITE_OK) return rc;
  return real_of(p)->pMethods->xSync(real_of(p), flags);
}

int x_file_size(sqlite3_file* p, sqlite3_int64* size) {
  if (int rc = flush_then(p); rc != SQLITE_OK) return rc;
  return real_of(p)->pMethods->xFileSize(real_of(p), size);
}

int x_lock(sqlite3_file* p, int level) {
  return real_of(p)->pMethods->xLock(real_of(p), level);
}
int x_unlock(sqlite3_file* p, int level) {
  return real_of(p)->pMethods->xUnlock(real_of(p), level);
}
int x_check_reserved(sqlite3_file* p, int* out) {
  return real_of(p)->pMethods->xCheckReservedLock(real_of(p), out);
}

int x_file_control(sqlite3_file* p, int op, void* arg) {
  if (int rc = flush_then(p); rc != SQLITE_OK) return rc;
  return real_of(p)->pMethods->xFileControl(real_of(p), op, arg);
}

int x_sector_size(sqlite3_file* p) {
  return real_of(p)->pMethods->xSectorSize(real_of(p));
}
int x_device_characteristics(sqlite3_file* p) {
  return real_of(p)->pMethods->xDeviceCharacteristics(real_of(p));
}

int x_shm_map(sqlite3_file* p, int region, int size, int extend, void volatile** out) {
  return real_of(p)->pMethods->xShmMap(real_of(p), region, size, extend, out);
}

// NOTE: the WAL's write lock is wal-index lock 0 and is released at the end of every write
// transaction (sqlite3WalEndWriteTransaction): the WAL's held bytes (a rolled-back transaction's
// spills; a commit's went at its sync) go first, while the lock is still ours. The unlock itself
// happens whatever the flush did: SQLite does not look at its result.
int x_shm_lock(sqlite3_file* p, int ofst, int n, int flags) {
  shim_file* f = as_shim(p);
  int rc_flush = SQLITE_OK;
  if ((flags & SQLITE_SHM_UNLOCK) && ofst == 0 && f->db_name) {
    shim_file* wal = nullptr;
    {
      std::lock_guard lock(g_wals_mu);
      for (shim_file* w : g_wals)
        if (w->db_name == f->db_name) wal = w;
    }
    // NOTE: outside the registry's lock: the WAL file is this connection's (the pager's name), used
    // by this thread only, and it is not closed while its database holds a lock.
    if (wal) rc_flush = flush(wal);
  }
  const int rc = f->real->pMethods->xShmLock(f->real, ofst, n, flags);
  return rc != SQLITE_OK ? rc : rc_flush;
}

void x_shm_barrier(sqlite3_file* p) {
  real_of(p)->pMethods->xShmBarrier(real_of(p));
}
int x_shm_unmap(sqlite3_file* p, int del) {
  return real_of(p)->pMethods->xShmUnmap(real_of(p), del);
}
int x_fetch(sqlite3_file* p, sqlite3_int64 ofst, int n, void** out) {
  return real_of(p)->pMethods->xFetch(real_of(p), ofst, n, out);
}
int x_unfetch(sqlite3_file* p, sqlite3_int64 ofst, void* ptr) {
  return real_of(p)->pMethods->xUnfetch(real_of(p), ofst, ptr);
}

// --- the VFS: open wraps unix's file; the rest is unix's --------------------------------

sqlite3_vfs* base_of(sqlite3_vfs* vfs) {
  return static_cast<sqlite3_vfs*>(vfs->pAppData);
}

int v_open(sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* p, int flags, int* out_flags) {
  sqlite3_vfs* base = base_of(vfs);
  shim_file* f = new (p) shim_file{};
  f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(p) + k_real_offset);
  std::memset(f->real, 0, size_t(base->szOsFile));
  const int rc = base->xOpen(base, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK || !f->real->pMethods) {
    f->base.pMethods = nullptr;  // nothing to close
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  if ((flags & SQLITE_OPEN_MAIN_DB) && name) f->db_name = name;
  if ((flags & SQLITE_OPEN_WAL) && name) {
    f->is_wal = true;
    f->db_name = sqlite3_filename_database(name);
    std::lock_guard lock(g_wals_mu);
    g_wals.push_back(f);
  }
  f->base.pMethods = &g_methods[std::clamp(f->real->pMethods->iVersion, 1, 3)];
  return SQLITE_OK;
}

int v_delete(sqlite3_vfs* vfs, const char* name, int sync_dir) {
  return base_of(vfs)->xDelete(base_of(vfs), name, sync_dir);
}
int v_access(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  return base_of(vfs)->xAccess(base_of(vfs), name, flags, out);
}
int v_full_pathname(sqlite3_vfs* vfs, const char* name, int n, char* out) {
  return base_of(vfs)->xFullPathname(base_of(vfs), name, n, out);
}
void* v_dl_open(sqlite3_vfs* vfs, const char* name) {
  return base_of(vfs)->xDlOpen(base_of(vfs), name);
}
void v_dl_error(sqlite3_vfs* vfs, int n, char* out) {
  base_of(vfs)->xDlError(base_of(vfs), n, out);
}
void (*v_dl_sym(sqlite3_vfs* vfs, void* h, const char* sym))(void) {
  return base_of(vfs)->xDlSym(base_of(vfs), h, sym);
}
void v_dl_close(sqlite3_vfs* vfs, void* h) {
  base_of(vfs)->xDlClose(base_of(vfs), h);
}
int v_randomness(sqlite3_vfs* vfs, int n, char* out) {
  return base_of(vfs)->xRandomness(base_of(vfs), n, out);
}
int v_sleep(sqlite3_vfs* vfs, int us) {
  return base_of(vfs)->xSleep(base_of(vfs), us);
}
int v_current_time(sqlite3_vfs* vfs, double* out) {
  return base_of(vfs)->xCurrentTime(base_of(vfs), out);
}
int v_last_error(sqlite3_vfs* vfs, int n, char* out) {
  return base_of(vfs)->xGetLastError(base_of(vfs), n, out);
}
int v_current_time64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  return base_of(vfs)->xCurrentTimeInt64(base_of(vfs), out);
}
int v_set_syscall(sqlite3_vfs* vfs, const char* name, sqlite3_syscall_ptr f) {
  return base_of(vfs)->xSetSystemCall(base_of(vfs), name, f);
}
sqlite3_syscall_ptr v_get_syscall(sqlite3_vfs* vfs, const char* name) {
  return base_of(vfs)->xGetSystemCall(base_of(vfs), name);
}
const char* v_next_syscall(sqlite3_vfs* vfs, const char* name) {
  return base_of(vfs)->xNextSystemCall(base_of(vfs), name);
}

void fill_methods() {
  for (int v = 1; v <= 3; ++v) {
    sqlite3_io_methods& m = g_methods[v];
    m.iVersion = v;
    m.xClose = x_close;
    m.xRead = x_read;
    m.xWrite = x_write;
    m.xTruncate = x_truncate;
    m.xSync = x_sync;
    m.xFileSize = x_file_size;
    m.xLock = x_lock;
    m.xUnlock = x_unlock;
    m.xCheckReservedLock = x_check_reserved;
    m.xFileControl = x_file_control;
    m.xSectorSize = x_sector_size;
    m.xDeviceCharacteristics = x_device_characteristics;
    m.xShmMap = x_shm_map;
    m.xShmLock = x_shm_lock;
    m.xShmBarrier = x_shm_barrier;
    m.xShmUnmap = x_shm_unmap;
    m.xFetch = x_fetch;
    m.xUnfetch = x_unfetch;
  }
}

}  // namespace

const char* wal_buffer_vfs_over(const char* base_name, const char* name) {
  static std::once_flag methods_once;
  std::call_once(methods_once, fill_methods);
  sqlite3_vfs* base = sqlite3_vfs_find(base_name);
  if (!base || base->iVersion < 3) return nullptr;
  // NOTE: never freed: SQLite keeps a registered VFS until it is unregistered, which nothing does.
  auto* vfs = new sqlite3_vfs{};
  vfs->iVersion = 3;
  vfs->szOsFile = int(k_real_offset) + base->szOsFile;
  vfs->mxPathname = base->mxPathname;
  vfs->zName = name;
  vfs->pAppData = base;
  vfs->xOpen = v_open;
  vfs->xDelete = v_delete;
  vfs->xAccess = v_access;
  vfs->xFullPathname = v_full_pathname;
  vfs->xDlOpen = v_dl_open;
  vfs->xDlError = v_dl_error;
  vfs->xDlSym = v_dl_sym;
  vfs->xDlClose = v_dl_close;
  vfs->xRandomness = v_randomness;
  vfs->xSleep = v_sleep;
  vfs->xCurrentTime = v_current_time;
  vfs->xGetLastError = v_last_error;
  vfs->xCurrentTimeInt64 = v_current_time64;
  vfs->xSetSystemCall = v_set_syscall;
  vfs->xGetSystemCall = v_get_syscall;
  vfs->xNextSystemCall = v_next_syscall;
  if (sqlite3_vfs_register(vfs, 0) != SQLITE_OK) {
    delete vfs;
    return nullptr;
  }
  return name;
}

const char* wal_buffer_vfs_name() {
  static const char* const name = wal_buffer_vfs_over("unix", "aq-walbuf");
  return name;
}

wal_buffer_vfs_counts wal_buffer_vfs_stats() {
  return {g_held.load(std::memory_order_relaxed), g_writes.load(std::memory_order_relaxed),
          g_flushes.load(std::memory_order_relaxed)};
}

}  // namespace agentq::store
