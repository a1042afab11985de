-- wrk script of the HTTP benchmark: POST /v1/check with the seeded
-- addresses, each request with the next of the benchmark's API keys.
--   wrk ... -s bench/wrk-check.lua URL -- REQUESTS_FILE [DELAY_MS]
-- REQUESTS_FILE: one "key<TAB>address" per line. Each wrk thread starts at
-- another place in the list. DELAY_MS paces every connection (one request,
-- then DELAY_MS of rest), for a fixed rate of connections * 1000 / DELAY_MS.
-- done() prints one JSON line: requests, errors, latency percentiles in µs.

local threads = {}

function setup(thread)
  thread:set("index", #threads)
  table.insert(threads, thread)
end

local requests = {}
local next_request = 0

function init(args)
  for line in io.lines(args[1]) do
    local key, ip = line:match("^([^\t]+)\t(.+)$")
    requests[#requests + 1] = wrk.format("POST", "/v1/check", {
      ["Authorization"] = "Bearer " .. key,
      ["Content-Type"] = "application/json",
    }, '{"ip":"' .. ip .. '"}')
  end
  next_request = (index * 7919) % #requests
  local pause = tonumber(args[2] or "0")
  -- wrk asks whether a delay() exists after init(): define it only to pace,
  -- since even a zero delay costs a timer per request.
  if pause > 0 then
    delay = function() return pause end
  end
end

function request()
  next_request = next_request % #requests + 1
  return requests[next_request]
end

function done(summary, latency, requests_)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"seconds":%.3f,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, summary.duration / 1e6, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
