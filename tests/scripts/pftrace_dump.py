#!/usr/bin/env python3
"""Decodes a Perfetto trace with Perfetto's own generated protobuf classes
(PyPI `perfetto`) and prints what the tests compare, as JSON:

  events   per CPU, in bundle order: [ts, pid, event, {field: value}];
           typed events are named by their FtraceEvent oneof field,
           generic ones "generic:<event_name>"
  lost     per CPU, the time stamps of bundles flagged lost_events
  threads  tid -> [name, tgid]; processes: pid -> cmdline
  stats    phase -> cpu -> {counter: value}
  system   the utsname fields
  counters track name -> [[ts, value]] (counter tracks)
  slices   the slices of thread tracks, rebuilt from their begins and
           ends as trace_processor nests them (an end closes the track's
           innermost open slice): {pid, tid, thread, ts, dur, depth, name,
           category, args: {name: value}}, by track then begin
  clocks   clock id -> time stamp (the clock snapshot)

usage: pftrace_dump.py TRACE
"""
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def fields(msg):
    return {f.name: v for f, v in msg.ListFields()}


def main():
    trace = pb.Trace()
    with open(sys.argv[1], "rb") as f:
        trace.ParseFromString(f.read())
    out = {"events": {}, "lost": {}, "threads": {}, "processes": {}, "stats": {}, "system": {},
           "counters": {}, "slices": []}
    tracks = {}
    # Thread tracks: uuid -> the thread, and its open slices.
    threads = {}
    open_slices = {}
    for p in trace.packet:
        kind = p.WhichOneof("data")
        if kind == "ftrace_events":
            b = p.ftrace_events
            evs = out["events"].setdefault(str(b.cpu), [])
            if b.lost_events and b.event:
                out["lost"].setdefault(str(b.cpu), []).append(b.event[0].timestamp)
            for e in b.event:
                name = e.WhichOneof("event")
                if name == "generic":
                    g = e.generic
                    vals = {}
                    for fl in g.field:
                        vals[fl.name] = getattr(fl, fl.WhichOneof("value")) if fl.WhichOneof("value") else None
                    evs.append([e.timestamp, e.pid, "generic:" + g.event_name, vals])
                else:
                    evs.append([e.timestamp, e.pid, name, fields(getattr(e, name))])
        elif kind == "process_tree":
            for t in p.process_tree.threads:
                out["threads"][str(t.tid)] = [t.name, t.tgid]
            for pr in p.process_tree.processes:
                out["processes"][str(pr.pid)] = list(pr.cmdline)
        elif kind == "ftrace_stats":
            phase = pb.FtraceStats.Phase.Name(p.ftrace_stats.phase)
            out["stats"][phase] = {str(c.cpu): fields(c) for c in p.ftrace_stats.cpu_stats}
        elif kind == "system_info":
            out["system"] = fields(p.system_info.utsname)
        elif kind == "clock_snapshot":
            out["clocks"] = {str(c.clock_id): c.timestamp for c in p.clock_snapshot.clocks}
        elif kind == "track_descriptor":
            td = p.track_descriptor
            if td.HasField("thread"):
                assert td.thread.HasField("pid") and td.thread.HasField("tid"), td
                threads[td.uuid] = td.thread
                open_slices[td.uuid] = []
                continue
            assert td.HasField("counter"), td
            tracks[td.uuid] = td.name
            out["counters"][td.name] = []
        elif kind == "track_event":
            te = p.track_event
            if te.type == pb.TrackEvent.TYPE_COUNTER:
                out["counters"][tracks[te.track_uuid]].append([p.timestamp, te.counter_value])
                continue
            stack = open_slices[te.track_uuid]
            if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                t = threads[te.track_uuid]
                s = {"pid": t.pid, "tid": t.tid, "thread": t.thread_name, "ts": p.timestamp,
                     "dur": None, "depth": len(stack), "name": te.name,
                     "category": ",".join(te.categories), "args": {}}
                for a in te.debug_annotations:
                    s["args"][a.name] = getattr(a, a.WhichOneof("value"))
                out["slices"].append(s)
                stack.append(s)
            else:
                assert te.type == pb.TrackEvent.TYPE_SLICE_END, te
                s = stack.pop()
                assert p.timestamp >= s["ts"], (s, p.timestamp)
                s["dur"] = p.timestamp - s["ts"]
    assert all(not v for v in open_slices.values()), "slices left open"
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
