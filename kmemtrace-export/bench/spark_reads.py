"""Reads two Parquet exports of the same log with Spark's vectorized reader
and says whether they hold the same values (aggregates over every column),
then asks the README's question of the second: a check, beside DuckDB's in
the tests, that an encoder change still writes what Spark reads.

    pip install pyspark   # needs a Java runtime
    python3 kmemtrace-export/bench/spark_reads.py BEFORE_DIR AFTER_DIR
"""
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled","false").config("spark.driver.memory","2g").config("spark.sql.ansi.enabled","false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
res = {}
dirs = sys.argv[1:3]
for d in dirs:
    for t in ["slab_events", "page_events", "pcp_events", "callsites"]:
        df = spark.read.parquet(f"{d}/{t}.parquet")
        df.createOrReplaceTempView("t")
        if t == "callsites":
            q = "select count(*), sum(hits), sum(bytes_alloc), sum(addr), sum(peak_live_bytes) from t"
        elif t == "slab_events":
            q = "select count(*), sum(ts_ns), sum(ptr % 1000003), sum(bytes_req), count(bytes_alloc), count(comm), sum(cast(by_recorder as int)), sum(cast(in_interrupt as int)), count(distinct call_site_sym), count(distinct event), sum(node), count(cache), sum(hash(comm)), sum(hash(cache)) from t"
        else:
            q = "select count(*), sum(ts_ns), sum(pfn % 1000003), sum(order), count(migratetype), sum(gfp_flags % 1000), count(comm), sum(hash(comm)), sum(hash(event))" + (", count(stack), sum(hash(stack)), sum(call_site % 1000003), sum(hash(call_site_sym))" if t == "page_events" else "") + " from t"
        res[(d, t)] = spark.sql(q).collect()[0]
        print(d, t, res[(d, t)], flush=True)
for t in ["slab_events", "page_events", "pcp_events", "callsites"]:
    print(t, "same" if res[(dirs[0], t)] == res[(dirs[1], t)] else "DIFFERENT")
# The README's question, by Spark's vectorized reader
spark.read.parquet(f"{dirs[1]}/slab_events.parquet").createOrReplaceTempView("slab")
spark.sql("""select capture, call_site_sym, count(*) hits, sum(bytes_alloc) bytes
  from slab where event like 'k%alloc%' and not by_recorder
  group by capture, call_site_sym order by bytes desc limit 3""").show(truncate=False)
