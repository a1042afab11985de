// The N-API layer: the only file that knows about JavaScript.
//
// Hot path: SnapshotHandle.lookup(text) parses the address, walks the trie and
// writes a fixed-size entry (numbers plus the canonical texts) into an
// ArrayBuffer the handle was given at construction. It returns the entry's
// status and allocates nothing; src/snapshot.ts turns the entry into a check
// result. Entry layout, in uint32 words from the entry's start (see kEntry*):
//   0 status (0 invalid, 4 IPv4, 6 IPv6)  1 flags  2 company  3 asn
//   4 location  5 route prefix length  6 ip text length (0: the input is
//   canonical)  7 route text length; bytes 32..127: ip text, then route text.
// The buffer starts with a 32-byte header whose first word is the generation
// of the snapshot the last call answered from; the second, after
// lookupBatchJson, how many of its entries were not addresses.
//
// For servers, SnapshotHandle.lookupJson(text) writes the whole check result
// as JSON bytes into a second buffer instead: the record texts are copied
// from the map, so the answer reaches the socket without a JS string. The
// texts around them (field names, flags and risk) come from src/result.ts at
// construction: no field name is written here. lookupBody(bytes) does the
// same from a request body of the usual form (request_body.h), and
// lookupBatchJson(texts) writes a whole batch answer.
#include <napi.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "address.h"
#include "change_counter.h"
#include "error_codes.h"
#include "request_body.h"
#include "snapshot_writer.h"
#include "store.h"

namespace ipr {
namespace {

constexpr size_t kHeaderBytes = 32;
constexpr size_t kEntryBytes = 128;
constexpr size_t kBatchCapacity = 256;  // addresses per lookupBatch call
constexpr size_t kEntryTextOffset = 32;
static_assert(kEntryTextOffset + kMaxAddressText + kMaxCidrText <= kEntryBytes, "entry text does not fit");
// exportPrefixes entries, in uint32 words: family (4 or 6), prefix length,
// the start (four words, most significant first; IPv4 in the first), the
// answer's id, then its flags, company, asn and location.
constexpr size_t kExportWords = 11;

struct AddonState {
  Napi::FunctionReference error_class;
};

// Errors carry a stable `code` (error_codes.h); they are instances of the JS
// class registered with setErrorClass (src/errors.ts: `new IprError(code,
// message)`) so callers can test `instanceof` and switch on the code.
Napi::Error MakeError(Napi::Env env, ErrorCode code, const std::string& message) {
  AddonState* state = env.GetInstanceData<AddonState>();
  Napi::String name = Napi::String::New(env, ErrorCodeName(code));
  Napi::Error error;
  if (state != nullptr && !state->error_class.IsEmpty()) {
    error = Napi::Error(env, state->error_class.New({name, Napi::String::New(env, message)}));
  } else {
    error = Napi::Error::New(env, message);
    error.Set("code", name);
  }
  return error;
}

// Runs `body`, turning C++ exceptions into JS errors with a code.
template <typename F>
auto Guard(Napi::Env env, F body) -> decltype(body()) {
  try {
    return body();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw MakeError(env, ErrorCode::kInvalidArgument, e.what());
  } catch (const std::exception& e) {
    throw MakeError(env, ErrorCode::kWriteFailed, e.what());
  }
}

class SnapshotHandle : public Napi::ObjectWrap<SnapshotHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "SnapshotHandle",
                       {InstanceMethod<&SnapshotHandle::LookupBatch>("lookupBatch"),
                        InstanceMethod<&SnapshotHandle::LookupBatchJson>("lookupBatchJson"),
                        InstanceMethod<&SnapshotHandle::Explain>("explain"),
                        InstanceMethod<&SnapshotHandle::Info>("info"),
                        InstanceMethod<&SnapshotHandle::Records>("records"),
                        InstanceMethod<&SnapshotHandle::ExportPrefixes>("exportPrefixes"),
                        InstanceMethod<&SnapshotHandle::Refresh>("refresh"),
                        InstanceMethod<&SnapshotHandle::Close>("close")});
  }

  // new SnapshotHandle(dataDir, out, jsonOut, jsonTexts)
  // jsonTexts: the texts WriteJson writes around what it fills in
  // (src/result.ts ResultJsonTexts); flags[f], from the address's closing
  // quote to the company's key, depends on the risk configuration.
  explicit SnapshotHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SnapshotHandle>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsString() || !info[1].IsArrayBuffer() || !info[2].IsArrayBuffer() || !info[3].IsObject()) {
      throw MakeError(env, ErrorCode::kInvalidArgument,
                      "SnapshotHandle(dataDir: string, out: ArrayBuffer, jsonOut: ArrayBuffer, jsonTexts: object)");
    }
    Napi::ArrayBuffer out = info[1].As<Napi::ArrayBuffer>();
    if (out.ByteLength() < kHeaderBytes + kEntryBytes || reinterpret_cast<uintptr_t>(out.Data()) % 8 != 0) {
      throw MakeError(env, ErrorCode::kInvalidArgument, "output buffer too small or misaligned");
    }
    out_ref_ = Napi::Persistent(out);
    out_ = static_cast<uint8_t*>(out.Data());
    capacity_ = (out.ByteLength() - kHeaderBytes) / kEntryBytes;
    Napi::ArrayBuffer json_out = info[2].As<Napi::ArrayBuffer>();
    json_out_ref_ = Napi::Persistent(json_out);
    json_out_ = static_cast<char*>(json_out.Data());
    json_capacity_ = json_out.ByteLength();
    Napi::Object texts = info[3].As<Napi::Object>();
    auto text = [&](const char* name) {
      Napi::Value value = texts.Get(name);
      if (!value.IsString()) throw MakeError(env, ErrorCode::kInvalidArgument, std::string("jsonTexts.") + name + " must be a string");
      return value.As<Napi::String>().Utf8Value();
    };
    json_open_ = text("open");
    json_location_ = text("location");
    json_asn_ = text("asn");
    json_route_ = text("route");
    Napi::Value flags = texts.Get("flags");
    if (!flags.IsArray() || flags.As<Napi::Array>().Length() != 1u << kFlagTableCount) {
      throw MakeError(env, ErrorCode::kInvalidArgument, "jsonTexts.flags needs one text per combination of flags");
    }
    for (uint32_t f = 0; f < 1u << kFlagTableCount; ++f) {
      Napi::Value flag_text = flags.As<Napi::Array>().Get(f);
      if (!flag_text.IsString()) throw MakeError(env, ErrorCode::kInvalidArgument, "jsonTexts.flags must hold strings");
      json_flags_.push_back(flag_text.As<Napi::String>().Utf8Value());
    }
    SnapshotError error;
    store_ = Store::Acquire(info[0].As<Napi::String>().Utf8Value(), &error);
    if (!store_) throw MakeError(env, error.code, error.message);
    Sync();
    Bind(env, "lookup", &Fast<&SnapshotHandle::LookupText>);
    Bind(env, "lookupJson", &Fast<&SnapshotHandle::LookupJsonText>);
    Bind(env, "lookupBody", &Fast<&SnapshotHandle::LookupBodyBytes>);
  }

 private:
  void Sync() {
    store_->Sync(&snapshot_, &generation_);
    uint32_t g = static_cast<uint32_t>(generation_);
    std::memcpy(out_, &g, 4);
  }

  void EnsureOpen(Napi::Env env) {
    if (!store_) throw MakeError(env, ErrorCode::kSnapshotClosed, "this snapshot was closed");
  }

  // Parses `value` (any JS value) into `addr`; false when it is not an address.
  // A valid text is at most kMaxAddressText bytes, so a longer string is cut
  // and then rejected by the parser.
  static bool ParseValue(napi_env env, napi_value value, ParsedAddress* addr, char* text, size_t* len) {
    return napi_get_value_string_utf8(env, value, text, kMaxAddressText + 2, len) == napi_ok &&
           ParseAddress(text, *len, addr);
  }

  // Fills an entry for a parsed address and its answer; `text` is the input.
  static void WriteEntry(const ParsedAddress& addr, const Answer& t, const char* text, size_t len, uint8_t* entry) {
    uint32_t* w = reinterpret_cast<uint32_t*>(entry);
    char* out_text = reinterpret_cast<char*>(entry + kEntryTextOffset);
    size_t ip_len = 0;
    if (addr.family == Family::kV6 || addr.mapped) {
      ip_len = FormatAddress(addr, out_text);
      if (ip_len == len && std::memcmp(out_text, text, len) == 0) ip_len = 0;
    }
    size_t route_len = t.asn == kNoRecord ? 0 : FormatRoute(addr, t.asn_len, out_text + ip_len);
    w[0] = static_cast<uint32_t>(addr.family);
    w[1] = t.flags;
    w[2] = t.company;
    w[3] = t.asn;
    w[4] = t.location;
    w[5] = t.asn_len;
    w[6] = static_cast<uint32_t>(ip_len);
    w[7] = static_cast<uint32_t>(route_len);
  }

  // Writes the entry for `value` (any JS value) and returns its status.
  uint32_t LookupValue(napi_env env, napi_value value, uint8_t* entry) {
    char text[kMaxAddressText + 2];
    size_t len = 0;
    ParsedAddress addr;
    if (!ParseValue(env, value, &addr, text, &len)) {
      reinterpret_cast<uint32_t*>(entry)[0] = 0;
      return 0;
    }
    WriteEntry(addr, snapshot_->Lookup(addr), text, len, entry);
    return static_cast<uint32_t>(addr.family);
  }

  // The hot methods are plain functions bound to this handle (napi function
  // data) instead of prototype methods: no per-call unwrap. Each holds the
  // handle object, so the handle lives as long as the function.
  void Bind(Napi::Env env, const char* name, napi_callback call) {
    napi_value fn;
    NAPI_THROW_IF_FAILED_VOID(env, napi_create_function(env, name, NAPI_AUTO_LENGTH, call, this, &fn));
    Napi::Function function(env, fn);
    function.Set("handle", Value());
    Value().Set(name, function);
  }

  // What a hot body answers when it threw instead (a JS exception is pending).
  static constexpr uint32_t kThrew = 0xffffffffu;

  // A hot call: the handle, synced to the current snapshot, runs `Body` on
  // the first argument (argc 0: none) and answers the uint32 it returns.
  template <uint32_t (SnapshotHandle::*Body)(napi_env, napi_value, size_t)>
  static napi_value Fast(napi_env env, napi_callback_info info) {
    size_t argc = 1;
    napi_value arg;
    void* data;
    if (napi_get_cb_info(env, info, &argc, &arg, nullptr, &data) != napi_ok) return nullptr;
    auto* self = static_cast<SnapshotHandle*>(data);
    if (!self->store_) {
      MakeError(env, ErrorCode::kSnapshotClosed, "this snapshot was closed").ThrowAsJavaScriptException();
      return nullptr;
    }
    self->Sync();
    uint32_t answer = (self->*Body)(env, arg, argc);
    if (answer == kThrew) return nullptr;
    napi_value result;
    napi_create_uint32(env, answer, &result);
    return result;
  }

  // lookup(text) -> status; the entry is the buffer's first.
  uint32_t LookupText(napi_env env, napi_value arg, size_t argc) {
    return argc < 1 ? 0 : LookupValue(env, arg, out_ + kHeaderBytes);
  }

  // Appends bytes to the JSON buffer; `overflow` once they do not fit.
  struct JsonOut {
    char* at;
    char* end;
    bool overflow = false;
    void Put(const void* data, size_t n) {
      if (n > static_cast<size_t>(end - at)) {
        overflow = true;
        return;
      }
      std::memcpy(at, data, n);
      at += n;
    }
    void Put(const char* text) { Put(text, std::strlen(text)); }
    void Put(const std::string& text) { Put(text.data(), text.size()); }
    void Record(Blob text) {
      // Not an object: a record whose bytes changed under the map (snapshot.h).
      if (text.size < 2 || text.data[0] != '{' || text.data[text.size - 1] != '}') {
        Put("null");
      } else {
        Put(text.data, text.size);
      }
    }
  };

  // Appends the check result of a parsed address as JSON: the same text as
  // JSON.stringify of the object result (src/result.ts defines both).
  void WriteJson(JsonOut* out, const ParsedAddress& addr, const Answer& t, const char* text, size_t len) const {
    char ip[kMaxAddressText];
    if (addr.family == Family::kV6 || addr.mapped) {
      len = FormatAddress(addr, ip);
      text = ip;
    }
    out->Put(json_open_);
    out->Put(text, len);
    out->Put(json_flags_[t.flags & ((1u << kFlagTableCount) - 1)]);
    out->Record(t.company == kNoRecord ? Blob{} : snapshot_->RecordText(kCompanyRecords, t.company));
    out->Put(json_location_);
    out->Record(t.location == kNoRecord ? Blob{} : snapshot_->RecordText(kLocationRecords, t.location));
    out->Put(json_asn_);
    Blob asn = t.asn == kNoRecord ? Blob{} : snapshot_->RecordText(kAsnRecords, t.asn);
    if (asn.size < 2 || asn.data[0] != '{' || asn.data[asn.size - 1] != '}') {
      out->Put("null");
    } else {
      // The ASN record gains the route before its closing brace.
      char route[kMaxCidrText];
      out->Put(asn.data, asn.size - 1);
      out->Put(json_route_);
      out->Put(route, FormatRoute(addr, t.asn_len, route));
      out->Put("\"}");
    }
    out->Put("}");
  }

  // The check result of a parsed address, alone at the start of the JSON
  // buffer; its length. Throws (a pending JS exception, 0) when it does not
  // fit: record texts are short, only a hostile snapshot could hold such a record.
  size_t WriteOneJson(napi_env env, const ParsedAddress& addr, const char* text, size_t len) {
    JsonOut out{json_out_, json_out_ + json_capacity_};
    WriteJson(&out, addr, snapshot_->Lookup(addr), text, len);
    if (out.overflow) {
      MakeError(env, ErrorCode::kSnapshotInvalid, snapshot_->path() + ": a check result does not fit the JSON buffer").ThrowAsJavaScriptException();
      return 0;
    }
    return static_cast<size_t>(out.at - json_out_);
  }

  // lookupJson(text) -> the length of the check result's JSON at the start of
  // the JSON buffer; 0 when `text` is not an address.
  uint32_t LookupJsonText(napi_env env, napi_value arg, size_t argc) {
    char text[kMaxAddressText + 2];
    size_t len = 0;
    ParsedAddress addr;
    if (argc < 1 || !ParseValue(env, arg, &addr, text, &len)) return 0;
    size_t written = WriteOneJson(env, addr, text, len);
    return written == 0 ? kThrew : static_cast<uint32_t>(written);
  }

  // lookupBody(bytes: ArrayBuffer | Uint8Array) -> the length of the check
  // result's JSON at the start of the JSON buffer, for a request body of the
  // usual form (request_body.h) holding an address; 0 for any other body,
  // which the caller answers on its general path. The bytes are read during
  // the call only.
  uint32_t LookupBodyBytes(napi_env env, napi_value arg, size_t argc) {
    void* data = nullptr;
    size_t size = 0;
    bool is_typed = false;
    if (argc < 1) return 0;
    if (napi_is_typedarray(env, arg, &is_typed) == napi_ok && is_typed) {
      napi_typedarray_type type;
      napi_value buffer;
      size_t offset;
      if (napi_get_typedarray_info(env, arg, &type, &size, &data, &buffer, &offset) != napi_ok || type != napi_uint8_array) return 0;
    } else if (napi_get_arraybuffer_info(env, arg, &data, &size) != napi_ok) {
      return 0;
    }
    const char* ip = nullptr;
    size_t ip_len = 0;
    ParsedAddress addr;
    if (!SimpleCheckBody(static_cast<const char*>(data), size, &ip, &ip_len) || !ParseAddress(ip, ip_len, &addr)) return 0;
    size_t written = WriteOneJson(env, addr, ip, ip_len);
    return written == 0 ? kThrew : static_cast<uint32_t>(written);
  }

  // lookupBatchJson(texts) -> the length of {"results":[...]} at the start of
  // the JSON buffer, with one check result per entry of `texts` in order;
  // 0 when it does not fit. An entry that is not an address leaves its place
  // empty (nothing between its commas) for the caller to fill with its error
  // object: the out buffer's header word 1 says how many, and the words from
  // the first entry on hold, for each, its index in `texts` and the byte
  // offset of its place in the JSON, ascending. The addresses are walked
  // kBatchCapacity at a time, interleaved.
  Napi::Value LookupBatchJson(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EnsureOpen(env);
    if (!info[0].IsArray()) throw MakeError(env, ErrorCode::kInvalidArgument, "lookupBatchJson(texts: unknown[])");
    Napi::Array texts = info[0].As<Napi::Array>();
    uint32_t length = texts.Length();
    uint32_t* invalid = reinterpret_cast<uint32_t*>(out_ + kHeaderBytes);
    size_t invalid_capacity = capacity_ * kEntryBytes / 8;
    if (length > invalid_capacity) throw MakeError(env, ErrorCode::kInvalidArgument, "lookupBatchJson: too many entries for the out buffer");
    Sync();
    JsonOut out{json_out_, json_out_ + json_capacity_};
    uint32_t invalid_count = 0;
    ParsedAddress addrs[kBatchCapacity];
    Answer answers[kBatchCapacity];
    bool valid[kBatchCapacity];
    char texts_copy[kBatchCapacity][kMaxAddressText + 2];
    size_t lens[kBatchCapacity];
    out.Put("{\"results\":[");
    for (uint32_t from = 0; from < length && !out.overflow; from += kBatchCapacity) {
      uint32_t count = std::min<uint32_t>(kBatchCapacity, length - from);
      // Parsed addresses are packed for the interleaved walk; valid[] keeps their places.
      ParsedAddress packed[kBatchCapacity];
      size_t parsed = 0;
      for (uint32_t i = 0; i < count; ++i) {
        napi_value element;
        valid[i] = napi_get_element(env, texts, from + i, &element) == napi_ok &&
                   ParseValue(env, element, &addrs[i], texts_copy[i], &lens[i]);
        if (valid[i]) packed[parsed++] = addrs[i];
      }
      snapshot_->LookupBatch(packed, parsed, answers);
      size_t k = 0;
      for (uint32_t i = 0; i < count; ++i) {
        if (from + i > 0) out.Put(",");
        if (!valid[i]) {
          invalid[2 * invalid_count] = from + i;
          invalid[2 * invalid_count + 1] = static_cast<uint32_t>(out.at - json_out_);
          ++invalid_count;
          continue;
        }
        WriteJson(&out, addrs[i], answers[k++], texts_copy[i], lens[i]);
      }
    }
    out.Put("]}");
    reinterpret_cast<uint32_t*>(out_)[1] = invalid_count;
    return Napi::Number::New(env, out.overflow ? 0 : static_cast<double>(out.at - json_out_));
  }

  // lookupBatch(texts, from, count) -> entries written (at most the
  // capacity). Parses every text first, then walks the tries interleaved
  // (Snapshot::LookupBatch), then writes the entries.
  Napi::Value LookupBatch(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EnsureOpen(env);
    if (!info[0].IsArray()) throw MakeError(env, ErrorCode::kInvalidArgument, "lookupBatch(texts: unknown[], from, count)");
    Napi::Array texts = info[0].As<Napi::Array>();
    uint32_t from = info[1].As<Napi::Number>().Uint32Value();
    uint32_t count = info[2].As<Napi::Number>().Uint32Value();
    uint32_t length = texts.Length();
    if (from > length) from = length;
    if (count > length - from) count = length - from;
    if (count > kBatchCapacity || count > capacity_) count = static_cast<uint32_t>(std::min(kBatchCapacity, capacity_));
    Sync();
    ParsedAddress addrs[kBatchCapacity];
    Answer answers[kBatchCapacity];
    uint16_t slot[kBatchCapacity];  // entry of each parsed address
    char texts_copy[kBatchCapacity][kMaxAddressText + 2];
    size_t lens[kBatchCapacity];
    size_t parsed = 0;
    for (uint32_t i = 0; i < count; ++i) {
      napi_value element;
      uint8_t* entry = out_ + kHeaderBytes + kEntryBytes * i;
      if (napi_get_element(env, texts, from + i, &element) != napi_ok ||
          !ParseValue(env, element, &addrs[parsed], texts_copy[parsed], &lens[parsed])) {
        reinterpret_cast<uint32_t*>(entry)[0] = 0;
        continue;
      }
      slot[parsed++] = static_cast<uint16_t>(i);
    }
    snapshot_->LookupBatch(addrs, parsed, answers);
    for (size_t k = 0; k < parsed; ++k) {
      WriteEntry(addrs[k], answers[k], texts_copy[k], lens[k], out_ + kHeaderBytes + kEntryBytes * slot[k]);
    }
    return Napi::Number::New(env, count);
  }

  // explain(text) -> null when `text` is not an address; else {json, evidence}:
  // the buffer's first entry and the JSON buffer hold its check result, as
  // lookup and lookupJson write them (`json` is the JSON's length), and
  // evidence is [{table, source, prefix, byAsn}] (Snapshot::Explain: table
  // and source are ids, prefix the listed prefix holding the address in
  // CIDR): all from one snapshot. Not on the lookup path: it allocates.
  Napi::Value Explain(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EnsureOpen(env);
    Sync();
    char text[kMaxAddressText + 2];
    size_t len = 0;
    ParsedAddress addr;
    if (info.Length() < 1 || !ParseValue(env, info[0], &addr, text, &len)) return env.Null();
    Answer answer = snapshot_->Lookup(addr);
    WriteEntry(addr, answer, text, len, out_ + kHeaderBytes);
    JsonOut out{json_out_, json_out_ + json_capacity_};
    WriteJson(&out, addr, answer, text, len);
    if (out.overflow) throw MakeError(env, ErrorCode::kSnapshotInvalid, snapshot_->path() + ": a check result does not fit the JSON buffer");
    size_t json = static_cast<size_t>(out.at - json_out_);
    std::vector<Evidence> evidence;
    snapshot_->Explain(addr, answer, &evidence);
    Napi::Array result = Napi::Array::New(env, evidence.size());
    for (uint32_t i = 0; i < evidence.size(); ++i) {
      const Evidence& e = evidence[i];
      char prefix[kMaxCidrText];
      Napi::Object o = Napi::Object::New(env);
      o.Set("table", e.table);
      o.Set("source", e.source);
      o.Set("prefix", Napi::String::New(env, prefix, FormatRoute(addr, e.len, prefix)));
      o.Set("byAsn", e.by_asn);
      result.Set(i, o);
    }
    Napi::Object explained = Napi::Object::New(env);
    explained.Set("json", static_cast<double>(json));
    explained.Set("evidence", result);
    return explained;
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EnsureOpen(env);
    Sync();
    const SnapshotHeader& h = snapshot_->header();
    Napi::Object o = Napi::Object::New(env);
    Blob meta = snapshot_->meta();
    o.Set("path", snapshot_->path());
    o.Set("meta", Napi::String::New(env, reinterpret_cast<const char*>(meta.data), meta.size));
    o.Set("formatVersion", h.format_version);
    o.Set("builtAtMs", static_cast<double>(h.built_at_ms));
    o.Set("fileBytes", static_cast<double>(snapshot_->file_size()));
    o.Set("checksum", Napi::BigInt::New(env, h.checksum));
    o.Set("generation", static_cast<double>(generation_));
    auto pair = [&](uint32_t v4, uint32_t v6) {
      Napi::Array a = Napi::Array::New(env, 2);
      a.Set(0u, v4);
      a.Set(1u, v6);
      return a;
    };
    o.Set("trieNodes", pair(snapshot_->trie4().node_count(), snapshot_->trie6().node_count()));
    o.Set("trieLeaves", pair(snapshot_->trie4().leaf_count(), snapshot_->trie6().leaf_count()));
    return o;
  }

  // records() -> [company, asn, location, source] ArrayBuffers over the mapped record
  // tables. They keep the snapshot mapped while JS holds them. Read-only:
  // writing to them faults (the map is PROT_READ).
  Napi::Value Records(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EnsureOpen(env);
    Sync();
    Napi::Array result = Napi::Array::New(env, kRecordKindCount);
    for (unsigned k = 0; k < kRecordKindCount; ++k) {
      Blob blob = snapshot_->records(static_cast<RecordKind>(k));
      auto* keep = new std::shared_ptr<const Snapshot>(snapshot_);
      Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(
          env, const_cast<uint8_t*>(blob.data), blob.size,
          [](Napi::Env, void*, std::shared_ptr<const Snapshot>* hint) { delete hint; }, keep);
      result.Set(k, buffer);
    }
    return result;
  }

  // exportPrefixes(out: ArrayBuffer, onBatch: (count) => void): the answer
  // space (Snapshot::ForEachAnswerPrefix), IPv4 then IPv6, in entries of
  // kExportWords words written into `out`; onBatch(count) is called each time
  // `out` is full and once at the end, and must read the entries before it
  // returns. Answer ids number the distinct answers from 0 in the order they
  // first appear, so an entry whose id is one past the last seen brings a
  // new answer.
  Napi::Value ExportPrefixes(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EnsureOpen(env);
    if (!info[0].IsArrayBuffer() || !info[1].IsFunction()) {
      throw Napi::TypeError::New(env, "exportPrefixes(out: ArrayBuffer, onBatch: (count: number) => void)");
    }
    Napi::ArrayBuffer out = info[0].As<Napi::ArrayBuffer>();
    Napi::Function on_batch = info[1].As<Napi::Function>();
    uint32_t* words = static_cast<uint32_t*>(out.Data());
    const size_t capacity = out.ByteLength() / (4 * kExportWords);
    if (capacity == 0 || reinterpret_cast<uintptr_t>(words) % 4 != 0) throw Napi::RangeError::New(env, "export buffer too small");
    Sync();
    std::shared_ptr<const Snapshot> snapshot = snapshot_;
    struct KeyHash {
      size_t operator()(const std::pair<uint64_t, uint64_t>& k) const { return std::hash<uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^ k.second); }
    };
    std::unordered_map<std::pair<uint64_t, uint64_t>, uint32_t, KeyHash> ids;
    size_t count = 0;
    auto flush = [&] {
      on_batch.Call({Napi::Number::New(env, static_cast<double>(count))});
      count = 0;
    };
    // A run's prefixes come one after another with one answer: look its id up once.
    Answer last{};
    uint32_t last_id = kNoRecord;
    auto put = [&](unsigned family, const uint32_t start[4], uint8_t len, const Answer& a) {
      if (last_id == kNoRecord || a.flags != last.flags || a.company != last.company || a.asn != last.asn || a.location != last.location) {
        auto key = std::make_pair(uint64_t{a.flags} << 32 | a.company, uint64_t{a.asn} << 32 | a.location);
        last_id = ids.emplace(key, static_cast<uint32_t>(ids.size())).first->second;
        last = a;
      }
      uint32_t* e = words + kExportWords * count;
      e[0] = family;
      e[1] = len;
      std::memcpy(e + 2, start, 16);
      e[6] = last_id;
      e[7] = a.flags;
      e[8] = a.company;
      e[9] = a.asn;
      e[10] = a.location;
      if (++count == capacity) flush();
    };
    snapshot->ForEachAnswerPrefix<uint32_t>([&](uint32_t start, uint8_t len, const Answer& a) {
      const uint32_t s[4] = {start, 0, 0, 0};
      put(4, s, len, a);
    });
    snapshot->ForEachAnswerPrefix<u128>([&](u128 start, uint8_t len, const Answer& a) {
      const uint32_t s[4] = {static_cast<uint32_t>(start >> 96), static_cast<uint32_t>(start >> 64),
                             static_cast<uint32_t>(start >> 32), static_cast<uint32_t>(start)};
      put(6, s, len, a);
    });
    flush();
    return env.Undefined();
  }

  class RefreshWorker : public Napi::AsyncWorker {
   public:
    RefreshWorker(Napi::Env env, std::shared_ptr<Store> store)
        : Napi::AsyncWorker(env), store_(std::move(store)), deferred_(Napi::Promise::Deferred::New(env)) {}
    Napi::Promise Promise() { return deferred_.Promise(); }
    void Execute() override { result_ = store_->Refresh(&error_); }
    void OnOK() override {
      Napi::Env env = Env();
      if (result_ == Store::RefreshResult::kFailed) {
        deferred_.Reject(MakeError(env, error_.code, error_.message).Value());
      } else {
        deferred_.Resolve(Napi::Boolean::New(env, result_ == Store::RefreshResult::kSwapped));
      }
    }

   private:
    std::shared_ptr<Store> store_;
    Napi::Promise::Deferred deferred_;
    Store::RefreshResult result_ = Store::RefreshResult::kUnchanged;
    SnapshotError error_;
  };

  // refresh() -> Promise<boolean>: true when a newer snapshot was swapped in.
  Napi::Value Refresh(const Napi::CallbackInfo& info) {
    EnsureOpen(info.Env());
    auto* worker = new RefreshWorker(info.Env(), store_);
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    snapshot_.reset();
    store_.reset();
    return info.Env().Undefined();
  }

  Napi::Reference<Napi::ArrayBuffer> out_ref_;
  uint8_t* out_ = nullptr;
  size_t capacity_ = 0;
  Napi::Reference<Napi::ArrayBuffer> json_out_ref_;
  char* json_out_ = nullptr;
  size_t json_capacity_ = 0;
  std::string json_open_;
  std::vector<std::string> json_flags_;
  std::string json_location_;
  std::string json_asn_;
  std::string json_route_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<const Snapshot> snapshot_;
  uint64_t generation_ = 0;
};

template <typename T>
std::vector<T> CopyTyped(const Napi::Value& value, const char* what) {
  if (!value.IsTypedArray()) throw std::invalid_argument(std::string(what) + " must be a typed array");
  Napi::TypedArray array = value.As<Napi::TypedArray>();
  if (array.ByteLength() % sizeof(T) != 0) throw std::invalid_argument(std::string(what) + " has a ragged length");
  std::vector<T> out(array.ByteLength() / sizeof(T));
  const uint8_t* data = static_cast<const uint8_t*>(array.ArrayBuffer().Data()) + array.ByteOffset();
  if (!out.empty()) std::memcpy(out.data(), data, array.ByteLength());
  return out;
}

class Writer : public Napi::ObjectWrap<Writer> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "SnapshotWriter",
                       {InstanceMethod<&Writer::Add>("add"),
                        InstanceMethod<&Writer::SetAsnAttributes>("setAsnAttributes"),
                        InstanceMethod<&Writer::SetAsnEvidence>("setAsnEvidence"),
                        InstanceMethod<&Writer::AsnRecordsOf>("asnRecordsOf"),
                        InstanceMethod<&Writer::AsnV4AddressCounts>("asnV4AddressCounts"),
                        InstanceMethod<&Writer::SetRecords>("setRecords"),
                        InstanceMethod<&Writer::Compile>("compile"), InstanceMethod<&Writer::Write>("write")});
  }
  explicit Writer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Writer>(info) {}

 private:
  // add(table, family 4|6, starts: Uint8Array, ends: Uint8Array, values: Uint32Array, sources: Uint16Array, count)
  Napi::Value Add(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&] {
      unsigned table = info[0].As<Napi::Number>().Uint32Value();
      unsigned family = info[1].As<Napi::Number>().Uint32Value();
      size_t count = info[6].As<Napi::Number>().Uint32Value();
      if (family != 4 && family != 6) throw std::invalid_argument("family must be 4 or 6");
      if (!info[2].IsTypedArray() || !info[3].IsTypedArray() || !info[4].IsTypedArray() || !info[5].IsTypedArray() ||
          info[4].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array ||
          info[5].As<Napi::TypedArray>().TypedArrayType() != napi_uint16_array) {
        throw std::invalid_argument("add(table, family, starts, ends, values: Uint32Array, sources: Uint16Array, count)");
      }
      size_t width = family == 4 ? 4 : 16;
      auto starts = info[2].As<Napi::TypedArray>(), ends = info[3].As<Napi::TypedArray>();
      auto values = info[4].As<Napi::Uint32Array>();
      auto sources = info[5].As<Napi::Uint16Array>();
      if (starts.ByteLength() < width * count || ends.ByteLength() < width * count || values.ElementLength() < count ||
          sources.ElementLength() < count) {
        throw std::invalid_argument("add: arrays shorter than count");
      }
      auto bytes = [](Napi::TypedArray a) {
        return static_cast<const uint8_t*>(a.ArrayBuffer().Data()) + a.ByteOffset();
      };
      writer_.AddRanges(static_cast<Table>(table), family == 4 ? Family::kV4 : Family::kV6, bytes(starts),
                        bytes(ends), values.Data(), sources.Data(), count);
      return info.Env().Undefined();
    });
  }

  Napi::Value SetAsnAttributes(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&] {
      writer_.SetAsnAttributes(CopyTyped<uint8_t>(info[0], "flags"), CopyTyped<uint32_t>(info[1], "companies"));
      return info.Env().Undefined();
    });
  }

  // asnRecordsOf(family 4|6, addresses: Uint8Array, count) -> Uint32Array of ASN record ids (0xFFFFFFFF: none)
  Napi::Value AsnRecordsOf(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      unsigned family = info[0].As<Napi::Number>().Uint32Value();
      if (family != 4 && family != 6) throw std::invalid_argument("family must be 4 or 6");
      std::vector<uint8_t> addresses = CopyTyped<uint8_t>(info[1], "addresses");
      size_t count = info[2].As<Napi::Number>().Uint32Value();
      if (addresses.size() < (family == 4 ? 4 : 16) * count) throw std::invalid_argument("asnRecordsOf: addresses shorter than count");
      std::vector<uint32_t> records = writer_.AsnRecordsOf(family == 4 ? Family::kV4 : Family::kV6, addresses.data(), count);
      Napi::Uint32Array out = Napi::Uint32Array::New(env, records.size());
      if (!records.empty()) std::memcpy(out.Data(), records.data(), 4 * records.size());
      return out;
    });
  }

  // asnV4AddressCounts() -> Float64Array: per ASN record id, the IPv4 addresses that answer it
  Napi::Value AsnV4AddressCounts(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      std::vector<uint64_t> counts = writer_.AsnV4AddressCounts();
      Napi::Float64Array out = Napi::Float64Array::New(env, counts.size());
      for (size_t i = 0; i < counts.size(); ++i) out[i] = static_cast<double>(counts[i]);
      return out;
    });
  }

  // setAsnEvidence(records: Uint32Array, sources: Uint16Array, tables: Uint8Array)
  Napi::Value SetAsnEvidence(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&] {
      writer_.SetAsnEvidence(CopyTyped<uint32_t>(info[0], "records"), CopyTyped<uint16_t>(info[1], "sources"),
                             CopyTyped<uint8_t>(info[2], "tables"));
      return info.Env().Undefined();
    });
  }

  Napi::Value SetRecords(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&] {
      unsigned kind = info[0].As<Napi::Number>().Uint32Value();
      writer_.SetRecords(static_cast<RecordKind>(kind), CopyTyped<uint8_t>(info[1], "bytes"),
                         CopyTyped<uint32_t>(info[2], "offsets"));
      return info.Env().Undefined();
    });
  }

  Napi::Value Compile(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Guard(env, [&]() -> Napi::Value {
      const CompileStats& s = writer_.Compile();
      auto pair = [&](const uint64_t* v) {
        Napi::Array a = Napi::Array::New(env, 2);
        a.Set(0u, static_cast<double>(v[0]));
        a.Set(1u, static_cast<double>(v[1]));
        return a;
      };
      Napi::Object o = Napi::Object::New(env);
      Napi::Array tables = Napi::Array::New(env, kTableCount);
      for (unsigned t = 0; t < kTableCount; ++t) {
        Napi::Object table = Napi::Object::New(env);
        table.Set("ranges", pair(s.tables[t].ranges));
        table.Set("prefixes", pair(s.tables[t].prefixes));
        tables.Set(t, table);
      }
      o.Set("tables", tables);
      o.Set("intervals", pair(s.intervals));
      o.Set("nodes", pair(s.nodes));
      o.Set("leaves", pair(s.leaves));
      o.Set("trieBytes", pair(s.trie_bytes));
      return o;
    });
  }

  // write(path, metaJson, builtAtMs)
  Napi::Value Write(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&] {
      writer_.Write(info[0].As<Napi::String>().Utf8Value(), info[1].As<Napi::String>().Utf8Value(),
                    static_cast<uint64_t>(info[2].As<Napi::Number>().DoubleValue()));
      return info.Env().Undefined();
    });
  }

  SnapshotWriter writer_;
};

// canonicalAddress(text) -> the canonical text, or null when `text` is not an address.
Napi::Value CanonicalAddress(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) return env.Null();
  char text[64];
  size_t len = 0;
  napi_get_value_string_utf8(env, info[0], text, sizeof text, &len);
  ParsedAddress addr;
  if (!ParseAddress(text, len, &addr)) return env.Null();
  char out[kMaxAddressText];
  return Napi::String::New(env, out, FormatAddress(addr, out));
}

// parseAddress(text, out: Uint8Array) -> 4 or 6, writing the address into
// out[0, 4) or out[0, 16) in network order (a mapped address as IPv4), or 0.
// For importers: feed lines go through the same strict parser as lookups.
Napi::Value ParseAddressInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().ByteLength() < 16) {
    throw MakeError(env, ErrorCode::kInvalidArgument, "parseAddress(text, out: Uint8Array of 16 bytes)");
  }
  Napi::TypedArray out = info[1].As<Napi::TypedArray>();
  uint8_t* bytes = static_cast<uint8_t*>(out.ArrayBuffer().Data()) + out.ByteOffset();
  char text[64];
  size_t len = 0;
  ParsedAddress addr;
  if (!info[0].IsString() || napi_get_value_string_utf8(env, info[0], text, sizeof text, &len) != napi_ok ||
      !ParseAddress(text, len, &addr)) {
    return Napi::Number::New(env, 0);
  }
  if (addr.family == Family::kV4) {
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(addr.v4 >> (24 - 8 * i));
  } else {
    for (int i = 0; i < 16; ++i) bytes[i] = static_cast<uint8_t>(addr.v6 >> (120 - 8 * i));
  }
  return Napi::Number::New(env, static_cast<double>(addr.family));
}

// mapChangeCounter(path) -> an ArrayBuffer over the shared counter of `path`
// (change_counter.h): its first uint32 is the counter, read with one load.
// Valid for the life of the process.
Napi::Value MapChangeCounterInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw MakeError(env, ErrorCode::kInvalidArgument, "mapChangeCounter(path: string)");
  std::string error;
  uint32_t* counter = MapChangeCounter(info[0].As<Napi::String>().Utf8Value(), &error);
  if (counter == nullptr) throw MakeError(env, ErrorCode::kStoreUnavailable, error);
  return Napi::ArrayBuffer::New(env, counter, kChangeCounterBytes, [](Napi::Env, void*) {});
}

// bumpChangeCounter(buffer) -> the counter after adding one, atomically
// across processes. `buffer` is what mapChangeCounter returned.
Napi::Value BumpChangeCounterIn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArrayBuffer() || info[0].As<Napi::ArrayBuffer>().ByteLength() != kChangeCounterBytes) {
    throw MakeError(env, ErrorCode::kInvalidArgument, "bumpChangeCounter(buffer from mapChangeCounter)");
  }
  auto* counter = static_cast<uint32_t*>(info[0].As<Napi::ArrayBuffer>().Data());
  return Napi::Number::New(env, BumpChangeCounter(counter));
}

Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  AddonState* state = info.Env().GetInstanceData<AddonState>();
  state->error_class = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

}  // namespace

Napi::Object InitAddon(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new AddonState());
  exports.Set("SnapshotHandle", SnapshotHandle::Define(env));
  exports.Set("SnapshotWriter", Writer::Define(env));
  exports.Set("canonicalAddress", Napi::Function::New(env, CanonicalAddress));
  exports.Set("parseAddress", Napi::Function::New(env, ParseAddressInto));
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass));
  exports.Set("mapChangeCounter", Napi::Function::New(env, MapChangeCounterInto));
  exports.Set("bumpChangeCounter", Napi::Function::New(env, BumpChangeCounterIn));
  exports.Set("formatVersion", kFormatVersion);
  Napi::Array tables = Napi::Array::New(env, kTableCount);
  for (unsigned t = 0; t < kTableCount; ++t) tables.Set(t, kTableNames[t]);
  exports.Set("tables", tables);
  Napi::Array codes = Napi::Array::New(env, static_cast<unsigned>(ErrorCode::kCount));
  for (unsigned c = 0; c < static_cast<unsigned>(ErrorCode::kCount); ++c) codes.Set(c, kErrorCodeNames[c]);
  exports.Set("errorCodes", codes);
  Napi::Object layout = Napi::Object::New(env);
  layout.Set("headerBytes", static_cast<double>(kHeaderBytes));
  layout.Set("entryBytes", static_cast<double>(kEntryBytes));
  layout.Set("entryTextOffset", static_cast<double>(kEntryTextOffset));
  layout.Set("batchCapacity", static_cast<double>(kBatchCapacity));
  layout.Set("exportWords", static_cast<double>(kExportWords));
  exports.Set("layout", layout);
  return exports;
}

}  // namespace ipr

static Napi::Object Init(Napi::Env env, Napi::Object exports) { return ipr::InitAddon(env, exports); }

NODE_API_MODULE(ipr_native, Init)
