#!/usr/bin/env python3
"""Reads a capture's Parquet files with DuckDB (PyPI `duckdb`) and prints,
as JSON, what the tests compare with the log and the report:

  types      column -> DuckDB type, per file
  events     event name -> rows, over the three event files
  mismatches call sites whose allocations, summed from slab_events
             (kmemtraced's own threads left out, as the report does),
             differ from callsites.parquet's hits and bytes
  callsites  call site -> [hits, bytes_req, bytes_alloc] from callsites.parquet
  capture    the distinct capture names in the rows
  page_sites "call site|order" -> the allocations mm_page_alloc rows
             stand for (sum of stands_for; kmemtraced's own threads left
             out), `-` for no call site
  stacks     [page rows with a call site, with a stack, with a stack whose
             last (innermost) frame is not the call site's function]
  cpu_back   rows, per event file, whose CPU is lower than the row
             before's (rows come CPU by CPU)
  episodes   where episodes.parquet is written: its rows in file order,
             each {column: value} (its types under types too)

usage: parquet_query.py DIR
"""
import json
import os
import sys

import duckdb


def main():
    d = sys.argv[1]
    con = duckdb.connect()
    f = lambda name: f"read_parquet('{d}/{name}.parquet')"
    out = {"types": {}, "events": {}}
    for name in ["slab_events", "page_events", "pcp_events", "callsites"]:
        out["types"][name] = {c: t for c, t, *_ in con.sql(f"describe select * from {f(name)}").fetchall()}
    for name in ["slab_events", "page_events", "pcp_events"]:
        for event, n in con.sql(f"select event, count(*) from {f(name)} group by 1").fetchall():
            out["events"][event] = out["events"].get(event, 0) + n
    out["mismatches"] = con.sql(f"""
        with ev as (
          select call_site_sym as callsite, count(*) as hits,
                 sum(bytes_req) as req, sum(bytes_alloc) as alloc
          from {f('slab_events')}
          where not by_recorder
            and event in ('kmalloc', 'kmalloc_node', 'kmem_cache_alloc', 'kmem_cache_alloc_node')
          group by 1)
        select callsite, c.hits, ev.hits, c.bytes_req, ev.req, c.bytes_alloc, ev.alloc
        from (select * from {f('callsites')} where hits > 0) c full join ev using (callsite)
        where c.hits is distinct from ev.hits or c.bytes_req is distinct from ev.req
           or c.bytes_alloc is distinct from ev.alloc""").fetchall()
    out["callsites"] = {
        c: [h, r, a]
        for c, h, r, a in con.sql(f"select callsite, hits, bytes_req, bytes_alloc from {f('callsites')}").fetchall()
    }
    out["capture"] = sorted({
        c for name in ["slab_events", "page_events", "pcp_events", "callsites"]
        for (c,) in con.sql(f"select distinct capture from {f(name)}").fetchall()
    })
    out["page_sites"] = {
        f"{s}|{o}": n
        for s, o, n in con.sql(f"""
            select coalesce(call_site_sym, '-'), "order", sum(stands_for) from {f('page_events')}
            where event = 'mm_page_alloc' and not by_recorder group by 1, 2
            having sum(stands_for) > 0""").fetchall()
    }
    # What `where not by_recorder` selects is what the report counts.
    out["page_frees"] = con.sql(f"""
        select count(*) from {f('page_events')}
        where event = 'mm_page_free' and not by_recorder""").fetchall()[0][0]
    out["stacks"] = list(con.sql(f"""
        select count(call_site), count(stack),
               count(*) filter (where stack is not null and
                 split_part(call_site_sym, '+', 1) != list_last(string_split(stack, ';')))
        from {f('page_events')}""").fetchall()[0])
    out["cpu_back"] = {
        name: con.sql(f"""
            select count(*) from (
              select cpu, lag(cpu) over (order by file_row_number) as before
              from read_parquet('{d}/{name}.parquet', file_row_number = true))
            where cpu < before""").fetchall()[0][0]
        for name in ["slab_events", "page_events", "pcp_events"]
    }
    if os.path.exists(f"{d}/episodes.parquet"):
        name = "episodes"
        out["types"][name] = {c: t for c, t, *_ in con.sql(f"describe select * from {f(name)}").fetchall()}
        rel = con.sql(f"""
            select * exclude (file_row_number)
            from read_parquet('{d}/episodes.parquet', file_row_number = true)
            order by file_row_number""")
        out["episodes"] = [dict(zip(rel.columns, row)) for row in rel.fetchall()]
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
