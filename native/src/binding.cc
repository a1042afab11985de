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
// of the snapshot the last call answered from.
//
// For servers, SnapshotHandle.lookupJson(text) writes the whole check result
// as JSON bytes into a second buffer instead: the record texts are copied
// from the map, so the answer reaches the socket without a JS string.
#include <napi.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "address.h"
#include "snapshot_writer.h"
#include "store.h"

namespace ipr {
namespace {

constexpr size_t kHeaderBytes = 32;
constexpr size_t kEntryBytes = 128;
constexpr size_t kBatchCapacity = 256;  // addresses per lookupBatch call
constexpr size_t kEntryTextOffset = 32;
static_assert(kEntryTextOffset + kMaxAddressText + kMaxCidrText <= kEntryBytes, "entry text does not fit");

struct AddonState {
  Napi::FunctionReference error_class;
};

// Errors carry a stable `code`; they are instances of the JS class registered
// with setErrorClass (src/errors.ts: `new IprError(code, message)`) so callers
// can test `instanceof` and switch on the code.
Napi::Error MakeError(Napi::Env env, const std::string& code, const std::string& message) {
  AddonState* state = env.GetInstanceData<AddonState>();
  Napi::Error error;
  if (state != nullptr && !state->error_class.IsEmpty()) {
    error = Napi::Error(env, state->error_class.New({Napi::String::New(env, code), Napi::String::New(env, message)}));
  } else {
    error = Napi::Error::New(env, message);
    error.Set("code", Napi::String::New(env, code));
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
    throw MakeError(env, "invalid_argument", e.what());
  } catch (const std::exception& e) {
    throw MakeError(env, "write_failed", e.what());
  }
}

class SnapshotHandle : public Napi::ObjectWrap<SnapshotHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "SnapshotHandle",
                       {InstanceMethod<&SnapshotHandle::LookupBatch>("lookupBatch"),
                        InstanceMethod<&SnapshotHandle::Explain>("explain"),
                        InstanceMethod<&SnapshotHandle::Info>("info"),
                        InstanceMethod<&SnapshotHandle::Records>("records"),
                        InstanceMethod<&SnapshotHandle::Refresh>("refresh"),
                        InstanceMethod<&SnapshotHandle::Close>("close")});
  }

  // new SnapshotHandle(dataDir, out, jsonOut, flagsJson)
  // flagsJson[f] is the JSON text of the check result from `,"is_vpn"` to the
  // recommendation for the flag bits f (it depends on the risk configuration).
  explicit SnapshotHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SnapshotHandle>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsString() || !info[1].IsArrayBuffer() || !info[2].IsArrayBuffer() || !info[3].IsArray()) {
      throw Napi::TypeError::New(env, "SnapshotHandle(dataDir: string, out: ArrayBuffer, jsonOut: ArrayBuffer, flagsJson: string[])");
    }
    Napi::ArrayBuffer out = info[1].As<Napi::ArrayBuffer>();
    if (out.ByteLength() < kHeaderBytes + kEntryBytes || reinterpret_cast<uintptr_t>(out.Data()) % 8 != 0) {
      throw Napi::RangeError::New(env, "output buffer too small or misaligned");
    }
    out_ref_ = Napi::Persistent(out);
    out_ = static_cast<uint8_t*>(out.Data());
    capacity_ = (out.ByteLength() - kHeaderBytes) / kEntryBytes;
    Napi::ArrayBuffer json_out = info[2].As<Napi::ArrayBuffer>();
    json_out_ref_ = Napi::Persistent(json_out);
    json_out_ = static_cast<char*>(json_out.Data());
    json_capacity_ = json_out.ByteLength();
    Napi::Array flags_json = info[3].As<Napi::Array>();
    if (flags_json.Length() != 1u << kFlagTableCount) {
      throw Napi::RangeError::New(env, "flagsJson needs one text per combination of flags");
    }
    for (uint32_t f = 0; f < flags_json.Length(); ++f) flags_json_.push_back(flags_json.Get(f).As<Napi::String>().Utf8Value());
    SnapshotError error;
    store_ = Store::Acquire(info[0].As<Napi::String>().Utf8Value(), &error);
    if (!store_) throw MakeError(env, error.code, error.message);
    Sync();
    // The hot method is a plain function bound to this handle (napi function
    // data) instead of a prototype method: no per-call unwrap. It holds the
    // handle object, so the handle lives as long as the function.
    napi_value lookup;
    NAPI_THROW_IF_FAILED_VOID(env, napi_create_function(env, "lookup", NAPI_AUTO_LENGTH, &SnapshotHandle::FastLookup,
                                                         this, &lookup));
    Napi::Function fn(env, lookup);
    fn.Set("handle", Value());
    Value().Set("lookup", fn);
    napi_value lookup_json;
    NAPI_THROW_IF_FAILED_VOID(env, napi_create_function(env, "lookupJson", NAPI_AUTO_LENGTH,
                                                         &SnapshotHandle::FastLookupJson, this, &lookup_json));
    Napi::Function json_fn(env, lookup_json);
    json_fn.Set("handle", Value());
    Value().Set("lookupJson", json_fn);
  }

 private:
  void Sync() {
    store_->Sync(&snapshot_, &generation_);
    uint32_t g = static_cast<uint32_t>(generation_);
    std::memcpy(out_, &g, 4);
  }

  void EnsureOpen(Napi::Env env) {
    if (!store_) throw MakeError(env, "snapshot_closed", "this snapshot was closed");
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

  // The start of a hot call (a plain function bound to its handle): the
  // handle, synced to the current snapshot, and the first argument (argc 0:
  // none). Null, with a JS exception pending, when the handle is closed.
  static SnapshotHandle* BeginCall(napi_env env, napi_callback_info info, napi_value* arg, size_t* argc) {
    *argc = 1;
    void* data;
    if (napi_get_cb_info(env, info, argc, arg, nullptr, &data) != napi_ok) return nullptr;
    auto* self = static_cast<SnapshotHandle*>(data);
    if (!self->store_) {
      MakeError(env, "snapshot_closed", "this snapshot was closed").ThrowAsJavaScriptException();
      return nullptr;
    }
    self->Sync();
    return self;
  }

  // lookup(text) -> status; the entry is the buffer's first.
  static napi_value FastLookup(napi_env env, napi_callback_info info) {
    size_t argc;
    napi_value arg;
    napi_value result;
    SnapshotHandle* self = BeginCall(env, info, &arg, &argc);
    if (self == nullptr) return nullptr;
    uint32_t status = argc < 1 ? 0 : self->LookupValue(env, arg, self->out_ + kHeaderBytes);
    napi_create_uint32(env, status, &result);
    return result;
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

  // Writes the check result of a parsed address as JSON: the shape of spec
  // 2.1, the same text as JSON.stringify of the object result. Returns the
  // length, or 0 when it does not fit the buffer.
  size_t WriteJson(const ParsedAddress& addr, const Answer& t, const char* text, size_t len) {
    JsonOut out{json_out_, json_out_ + json_capacity_};
    char ip[kMaxAddressText];
    if (addr.family == Family::kV6 || addr.mapped) {
      len = FormatAddress(addr, ip);
      text = ip;
    }
    out.Put("{\"ip\":\"");
    out.Put(text, len);
    out.Put("\"");
    out.Put(flags_json_[t.flags & ((1u << kFlagTableCount) - 1)]);
    out.Put(",\"company\":");
    out.Record(t.company == kNoRecord ? Blob{} : snapshot_->RecordText(kCompanyRecords, t.company));
    out.Put(",\"location\":");
    out.Record(t.location == kNoRecord ? Blob{} : snapshot_->RecordText(kLocationRecords, t.location));
    out.Put(",\"asn\":");
    Blob asn = t.asn == kNoRecord ? Blob{} : snapshot_->RecordText(kAsnRecords, t.asn);
    if (asn.size < 2 || asn.data[0] != '{' || asn.data[asn.size - 1] != '}') {
      out.Put("null");
    } else {
      // {"number":N,"name":"..."} gains the route before its closing brace.
      char route[kMaxCidrText];
      out.Put(asn.data, asn.size - 1);
      out.Put(",\"route\":\"");
      out.Put(route, FormatRoute(addr, t.asn_len, route));
      out.Put("\"}");
    }
    out.Put("}");
    return out.overflow ? 0 : static_cast<size_t>(out.at - json_out_);
  }

  // lookupJson(text) -> the length of the check result's JSON at the start of
  // the JSON buffer; 0 when `text` is not an address. Throws when a result
  // does not fit the buffer (record texts are short; only a hostile snapshot
  // could hold such a record).
  static napi_value FastLookupJson(napi_env env, napi_callback_info info) {
    size_t argc;
    napi_value arg;
    napi_value result;
    SnapshotHandle* self = BeginCall(env, info, &arg, &argc);
    if (self == nullptr) return nullptr;
    char text[kMaxAddressText + 2];
    size_t len = 0;
    ParsedAddress addr;
    size_t written = 0;
    if (argc >= 1 && ParseValue(env, arg, &addr, text, &len)) {
      written = self->WriteJson(addr, self->snapshot_->Lookup(addr), text, len);
      if (written == 0) {
        MakeError(env, "snapshot_invalid", self->snapshot_->path() + ": a check result does not fit the JSON buffer")
            .ThrowAsJavaScriptException();
        return nullptr;
      }
    }
    napi_create_uint32(env, static_cast<uint32_t>(written), &result);
    return result;
  }

  // lookupBatch(texts, from, count) -> entries written (at most the
  // capacity). Parses every text first, then walks the tries interleaved
  // (Snapshot::LookupBatch), then writes the entries.
  Napi::Value LookupBatch(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EnsureOpen(env);
    if (!info[0].IsArray()) throw Napi::TypeError::New(env, "lookupBatch(texts: unknown[], from, count)");
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
    size_t json = WriteJson(addr, answer, text, len);
    if (json == 0) throw MakeError(env, "snapshot_invalid", snapshot_->path() + ": a check result does not fit the JSON buffer");
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
  std::vector<std::string> flags_json_;
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
    throw Napi::TypeError::New(env, "parseAddress(text, out: Uint8Array of 16 bytes)");
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
  exports.Set("formatVersion", kFormatVersion);
  Napi::Object layout = Napi::Object::New(env);
  layout.Set("headerBytes", static_cast<double>(kHeaderBytes));
  layout.Set("entryBytes", static_cast<double>(kEntryBytes));
  layout.Set("entryTextOffset", static_cast<double>(kEntryTextOffset));
  layout.Set("batchCapacity", static_cast<double>(kBatchCapacity));
  exports.Set("layout", layout);
  return exports;
}

}  // namespace ipr

static Napi::Object Init(Napi::Env env, Napi::Object exports) { return ipr::InitAddon(env, exports); }

NODE_API_MODULE(ipr_native, Init)
