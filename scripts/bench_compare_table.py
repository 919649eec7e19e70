#!/usr/bin/env python3
# The table of scripts/bench_compare.sh: per store and figure, the three
# runs of each build and the ratio of their medians.
import sys, json, glob, statistics as st, collections
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    store, which, i, _ = f.split('/')[-1].split('.')
    j = json.load(open(f))
    m = rows[store][which]
    m.append({
      'cycle/floor': j.get('cycle_ratio_to_floor'),
      'handoff/floor': j.get('handoff_ratio_to_floor'),
      'hot/ideal': j['hot_key']['ratio_to_ideal'],
      'many/floor': j['many_keys'].get('ratio_to_floor'),
      'cycle p50 us': j['cycle']['p50_us'],
      'handoff p50 us': (j.get('handoff') or {}).get('p50_us'),
    })
print('| store | figure | before (3 runs) | after (3 runs) | medians after/before |')
print('| --- | --- | --- | --- | ---: |')
for store in ['sqlite','postgres','redis','zookeeper','etcd']:
    if store not in rows: continue
    for k in ['cycle/floor','handoff/floor','hot/ideal','many/floor','cycle p50 us','handoff p50 us']:
        b=[r[k] for r in rows[store]['old'] if r[k] is not None]
        a=[r[k] for r in rows[store]['new'] if r[k] is not None]
        if not a or not b: continue
        fmt=lambda xs: ' '.join(f'{x:.2f}' if x<100 else f'{x:.0f}' for x in xs)
        print(f'| {store} | {k} | {fmt(b)} | {fmt(a)} | {st.median(a)/st.median(b):.2f} |')
