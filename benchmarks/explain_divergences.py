"""Explain the greedy divergences of `verispec bench` (bf16): the gap between the target-only token and
the method token in 1-, 2- and 4-row target forwards of the same prefix (a verification forward has
several rows). Reads benchmarks/results/bench_real_cpu.json; writes ..._divergences.json.

    python3 benchmarks/explain_divergences.py
"""
import json, torch
from verispec.empirical.weights import load_pair
from verispec.empirical.prompts import humaneval_prompts
torch.set_num_threads(2)
r = json.load(open('benchmarks/results/bench_real_cpu.json'))
pair = load_pair(progress=False)
prompts = {p['task_id']: p['prompt'] for p in humaneval_prompts(10)}
out = []
for row in r['summary']:
    for d in row.get('divergences', []):
        t, i = d['task_id'], d['index']
        ids = pair.tokenizer(prompts[t], return_tensors='pt').input_ids[0].tolist()
        gen = r['records'][f"target_only|T=0|{t}"]['tokens'][:i]
        seq = torch.tensor([ids + gen])
        a, b = d['target_only_token'], d['token']
        res = {'runner': row['runner'], 'task_id': t, 'index': i, 'target_only_token': a, 'method_token': b}
        for k in (1, 2, 4):  # last k positions in one forward (k rows), as a verification forward does
            cache = pair.target.prefill(seq[:, :-k])[1]
            logits = pair.target.chain(cache, seq[:, -k:])[0, -1]
            res[f'{k}_row_gap'] = float(logits[a] - logits[b])
            res[f'{k}_row_argmax'] = int(logits.argmax())
        print(res, flush=True)
        out.append(res)
json.dump(out, open('benchmarks/results/bench_real_cpu_divergences.json', 'w'), indent=1)
