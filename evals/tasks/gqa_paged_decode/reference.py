import math

import torch


def make_inputs(workload, seed, device, dtype):
    gen = torch.Generator(device=device).manual_seed(seed)
    t = getattr(torch, dtype)
    b, length, hq, hkv, d, page = (workload[k] for k in ("B", "L", "HQ", "HKV", "D", "PAGE"))
    pages_per_seq = -(-length // page)
    num_pages = b * pages_per_seq + 3  # a few pages that no sequence uses
    q = torch.randn(b, hq, d, generator=gen, device=device).to(t)
    k_cache = torch.randn(num_pages, page, hkv, d, generator=gen, device=device).to(t)
    v_cache = torch.randn(num_pages, page, hkv, d, generator=gen, device=device).to(t)
    perm = torch.randperm(num_pages, generator=gen, device=device)[: b * pages_per_seq]
    block_table = perm.view(b, pages_per_seq).to(torch.int32)
    seq_lens = torch.full((b,), length, dtype=torch.int32, device=device)
    return (q, k_cache, v_cache, block_table, seq_lens)


def reference(q, k_cache, v_cache, block_table, seq_lens):
    b, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    for i in range(b):
        n = int(seq_lens[i])
        pages = block_table[i, : -(-n // page)].long()
        k = k_cache[pages].reshape(-1, hkv, d)[:n].float().repeat_interleave(hq // hkv, dim=1)
        v = v_cache[pages].reshape(-1, hkv, d)[:n].float().repeat_interleave(hq // hkv, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[i].float(), k) / math.sqrt(d)
        out[i] = torch.einsum("hn,nhd->hd", scores.softmax(dim=-1), v).to(q.dtype)
    return out


def flops(workload, dtype):
    # q.k and p.v: two multiply-adds per (query head, token, dim)
    return 4.0 * workload["B"] * workload["HQ"] * workload["L"] * workload["D"]


def bytes_moved(workload, dtype):
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    b, length, hq, hkv, d, page = (workload[k] for k in ("B", "L", "HQ", "HKV", "D", "PAGE"))
    kv = 2.0 * b * length * hkv * d * size          # each KV head read once per sequence
    return kv + 2.0 * b * hq * d * size + b * (-(-length // page)) * 4 + b * 4
