// The error codes of the native side, each a key of ERROR_CODES in
// src/errors.ts (the one error registry). Errors cross into JavaScript as
// IprError(code, message) with the code's name below, never as a bare string:
// SnapshotError and the binding take an ErrorCode, so a code that is not
// listed here does not compile. The addon reports the names in order
// (`errorCodes`), and test/errors.test.ts holds them equal to the registry.
#pragma once

namespace ipr {

enum class ErrorCode : unsigned {
  kSnapshotMissing,  // no data folder, no CURRENT pointer, or the file it names is gone
  kSnapshotInvalid,  // not a snapshot, or damaged before it was opened
  kSnapshotVersion,  // a snapshot of another format version
  kSnapshotDamaged,  // the file being served was written to or truncated in place
  kSnapshotClosed,   // a lookup on a handle after close()
  kInvalidArgument,  // a call the binding cannot take (wrong types, ranges out of order)
  kWriteFailed,      // the writer could not compile or write a snapshot
  kStoreUnavailable, // the account store's change counter could not be opened or mapped
  kCount
};

constexpr const char* kErrorCodeNames[] = {
    "snapshot_missing", "snapshot_invalid", "snapshot_version", "snapshot_damaged",
    "snapshot_closed",  "invalid_argument", "write_failed",     "store_unavailable",
};
static_assert(sizeof kErrorCodeNames / sizeof kErrorCodeNames[0] == static_cast<unsigned>(ErrorCode::kCount),
              "one name per error code");

constexpr const char* ErrorCodeName(ErrorCode code) { return kErrorCodeNames[static_cast<unsigned>(code)]; }

}  // namespace ipr
