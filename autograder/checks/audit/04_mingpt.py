"""Audit bank of assignment 04 (minGPT): each item's catalogued mistakes, and correct answers
written another way (see autograder/commands/audit.py).

The attention layer has the catalogue's attention mistakes and a squeezed output; the block has a
squeezed output and its MLP's dropout written as F.dropout (left on in eval mode); the model has the
embeddings' dropout left on the same way, a summed loss, a mean that counts the positions whose
target is -1, and positions that start at 0 again after the KV cache; generation has the sampling
mistakes (no draw, the temperature multiplied or ignored, a top-k position returned as the token)
and a context cropped to its first tokens; the KV cache, whose given code and the model do the
caching, has the same cropping mistake (a cache that slides is not in the catalogue). Every answer
cell holds the whole class or function, given lines included, so a mutant may touch the given lines
too (the split of the heads, their merge, the output projection), as a student may.
"""

SCORES = "att = (q @ k.transpose(-2, -1)) / math.sqrt(d_k)"
FILL = 'att = att.masked_fill(mask == 0, float("-inf"))'
SOFTMAX = "att = F.softmax(att, dim=-1)"
SPLIT = ("k = self.key(x).view(B, T, self.n_head, hs).transpose(1, 2)",
         "q = self.query(x).view(B, T, self.n_head, hs).transpose(1, 2)",
         "v = self.value(x).view(B, T, self.n_head, hs).transpose(1, 2)")
MERGE = "y = y.transpose(1, 2).contiguous().view(B, T, C)"
RETURN = "return self.resid_drop(self.proj(y))"

LOSS = "loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)"
GPT_BODY = """        tokens = self.tok_emb(idx)                          # (B, T, C)
        positions = self.pos_emb[:, start:start + T, :]     # (1, T, C), the same for every sequence
        x = self.drop(tokens + positions)                   # (B, T, C)
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache)                             # (B, T, C)
        logits = self.head(self.ln_f(x))                    # (B, T, vocab_size)
"""

BLOCK_BODY = """        x = x + self.attn(self.ln1(x), kv_cache)   # (B, T, C): the tokens exchange information
        x = x + self.mlp(self.ln2(x))              # (B, T, C): each token on its own
        return x
"""

TOP_K = """    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]   # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))   # the others can no longer be drawn
"""
TEMPERATURE = "    logits = logits / temperature                                  # (B, vocab_size)\n"
SAMPLE = ("    probs = F.softmax(logits, dim=-1)                              # (B, vocab_size), rows sum to 1\n"
          "    return torch.multinomial(probs, num_samples=1)                 # (B, 1)\n")
GENERATE_LOOP = """    for _ in range(max_new_tokens):
        context = idx[:, -model.config.block_size:]                # (B, at most block_size)
        logits, _ = model(context)                                 # (B, T', vocab_size)
        next_token = sample_next_token(logits[:, -1, :], temperature, top_k)   # (B, 1)
        idx = torch.cat([idx, next_token], dim=1)                  # (B, T + 1)
    return idx
"""

CACHE_BODY = """    block_size = model.config.block_size
    kv_cache = None
    for _ in range(max_new_tokens):
        if kv_cache is not None and kv_cache[0]["k"].size(2) < block_size:
            logits, _ = model(idx[:, -1:], kv_cache=kv_cache)           # the newest token only: (B, 1, vocab)
        else:
            kv_cache = [{} for _ in model.blocks]                       # first step, or a full cache: restart
            logits, _ = model(idx[:, -block_size:], kv_cache=kv_cache)  # the cropped context fills the cache
        next_token = sample_next_token(logits[:, -1, :], temperature, top_k)   # (B, 1)
        idx = torch.cat([idx, next_token], dim=1)
    return idx
"""


def mutants(answer):
    def attention(*replacements):
        return answer("mingpt_attention", *replacements)

    return {
        "mingpt_attention": {
            "softmax_wrong_dim": attention((SOFTMAX, "att = F.softmax(att, dim=2)")),
            "no_scaling": attention((SCORES, "att = q @ k.transpose(-2, -1)")),
            "scaled_by_model_width": attention((SCORES, "att = (q @ k.transpose(-2, -1)) / math.sqrt(C)")),
            "mask_filled_with_zero": attention((FILL, "att = att.masked_fill(mask == 0, 0.0)")),
            "mask_hides_diagonal": attention(
                ("torch.tril(torch.ones(config.block_size, config.block_size))",
                 "torch.tril(torch.ones(config.block_size, config.block_size), diagonal=-1)")),
            "inverted_mask": attention((FILL, 'att = att.masked_fill(mask == 1, float("-inf"))')),
            "mask_leaks_next_token": attention(
                ("torch.tril(torch.ones(config.block_size, config.block_size))",
                 "torch.tril(torch.ones(config.block_size, config.block_size), diagonal=1)")),
            "mask_after_softmax": attention((FILL, "att = att + 0.0"),
                                            (SOFTMAX, SOFTMAX + "\n        att = att.masked_fill(mask == 0, 0.0)")),
            "split_heads_without_transpose": attention(
                *((line, line.replace("view(B, T, self.n_head, hs).transpose(1, 2)", "view(B, self.n_head, T, hs)"))
                  for line in SPLIT)),
            "merge_heads_without_transpose": attention((MERGE, "y = y.contiguous().view(B, T, C)")),
            "missing_output_projection": attention((RETURN, "return self.resid_drop(y)")),
            "dropout_in_eval": attention(("att = self.attn_drop(att)", "att = F.dropout(att, p=self.attn_drop.p)")),
            "squeezed_size_one": attention((RETURN, RETURN + ".squeeze()")),
        },
        "block": {
            "squeezed_size_one": answer("block", ("        return x\n", "        return x.squeeze()\n")),
            # the MLP run layer by layer, its dropout as F.dropout, which eval mode does not switch off
            "dropout_in_eval": answer("block", (BLOCK_BODY, (
                "        x = x + self.attn(self.ln1(x), kv_cache)\n"
                "        h = self.ln2(x)\n"
                "        for layer in self.mlp[:-1]:\n"
                "            h = layer(h)\n"
                "        return x + F.dropout(h, p=self.mlp[-1].p)\n"))),
        },
        "gpt": {
            "cache_positions_not_offset": answer("gpt", ("positions = self.pos_emb[:, start:start + T, :]",
                                                         "positions = self.pos_emb[:, :T, :]")),
            "dropout_in_eval": answer("gpt", ("x = self.drop(tokens + positions)",
                                              "x = F.dropout(tokens + positions, p=self.drop.p)")),
            "loss_summed": answer("gpt", (LOSS, LOSS.replace("ignore_index=-1)", 'ignore_index=-1, reduction="sum")'))),
            "loss_mean_over_ignored": answer("gpt", (LOSS, (
                "flat = targets.view(-1)\n"
                "            losses = F.cross_entropy(logits.view(-1, logits.size(-1)), flat.clamp(min=0), "
                'reduction="none")\n'
                "            loss = (losses * (flat != -1)).mean()   # the positions of -1 count 0"))),
        },
        "generate": {
            "sampling_greedy": answer("generate", (SAMPLE, "    return logits.argmax(dim=-1, keepdim=True)\n")),
            "temperature_multiplied": answer("generate", (TEMPERATURE, TEMPERATURE.replace("/", "*"))),
            "temperature_ignored": answer(
                "generate", (TEMPERATURE, ""),
                (SAMPLE, "    probs = F.softmax(logits, dim=-1) / temperature\n"
                         "    return torch.multinomial(probs, num_samples=1)\n")),
            "top_k_index_not_mapped": answer(
                "generate", (TOP_K, "    if top_k is not None:\n"
                                    "        top = torch.topk(logits, min(top_k, logits.size(-1))).values\n"
                                    "        return torch.multinomial(F.softmax(top, dim=-1), num_samples=1)\n")),
            "context_cropped_to_first_tokens": answer(
                "generate", ("context = idx[:, -model.config.block_size:]", "context = idx[:, :model.config.block_size]")),
        },
        "kv_cache": {
            "context_cropped_to_first_tokens": answer(
                "kv_cache", ("model(idx[:, -block_size:], kv_cache=kv_cache)", "model(idx[:, :block_size], kv_cache=kv_cache)")),
            # the newest token and the cache must fit, written one too strictly
            "cache_restarted_early": answer("kv_cache", ('kv_cache[0]["k"].size(2) < block_size:',
                                                         'kv_cache[0]["k"].size(2) + 1 < block_size:')),
        },
    }


def alternatives(answer):
    def attention(*replacements):
        return answer("mingpt_attention", *replacements)

    def block(body):
        return answer("block", (BLOCK_BODY, body))

    def gpt(*replacements):
        return answer("gpt", *replacements)

    def generate(*replacements):
        return answer("generate", *replacements)

    def cache(body):
        return answer("kv_cache", (CACHE_BODY, body))

    return {
        "mingpt_attention": [
            ("einsum scores", attention((SCORES, "att = torch.einsum('bhqd,bhkd->bhqk', q, k) / math.sqrt(d_k)"))),
            ("scale the queries first", attention((SCORES, "att = (q / d_k ** 0.5) @ k.transpose(-2, -1)"))),
            ("torch.finfo(...).min fill",
             attention((FILL, "att = att.masked_fill(mask == 0, torch.finfo(att.dtype).min)"))),
            ("reshape to merge the heads", attention((MERGE, "y = y.transpose(1, 2).reshape(B, T, C)"))),
            ("mask added as -inf, softmax as a method", attention(
                (FILL, 'att = att + torch.zeros_like(att).masked_fill(~mask.bool(), float("-inf"))'),
                (SOFTMAX, "att = att.softmax(dim=3)"))),
            ("own causal mask from triu, matmul and mT", attention(
                (SCORES, "att = torch.matmul(q, k.mT) * d_k ** -0.5"),
                (FILL, ("future = torch.ones(T, T_k, dtype=torch.bool, device=x.device).triu(T_k - T + 1)\n"
                        '        att = att.masked_fill(future, float("-inf"))')))),
            ("reshape and permute to split the heads", attention(
                *((line, line.replace("view(B, T, self.n_head, hs).transpose(1, 2)",
                                      "reshape(B, T, self.n_head, hs).permute(0, 2, 1, 3)"))
                  for line in SPLIT))),
        ],
        "block": [
            ("named sublayer outputs, keyword kv_cache", block(
                "        attended = self.attn(self.ln1(x), kv_cache=kv_cache)   # (B, T, C)\n"
                "        x = x + attended\n"
                "        mixed = self.mlp(self.ln2(x))                           # (B, T, C)\n"
                "        return x + mixed\n")),
            ("MLP layer by layer", block(
                "        x = x + self.attn(self.ln1(x), kv_cache)\n"
                "        h = self.ln2(x)\n"
                "        for layer in self.mlp:\n"
                "            h = layer(h)\n"
                "        return x + h\n")),
            ("F.layer_norm with the LayerNorms' parameters", block(
                "        C = x.size(-1)\n"
                "        h = F.layer_norm(x, (C,), self.ln1.weight, self.ln1.bias, self.ln1.eps)\n"
                "        x = torch.add(x, self.attn(h, kv_cache))\n"
                "        h = F.layer_norm(x, (C,), self.ln2.weight, self.ln2.bias, self.ln2.eps)\n"
                "        return torch.add(x, self.mlp(h))\n")),
        ],
        "gpt": [
            ("sum over the counted positions / their count", gpt(
                (LOSS, ("flat = targets.reshape(-1)\n"
                        "            summed = F.cross_entropy(logits.reshape(-1, logits.size(-1)), flat,\n"
                        '                                     ignore_index=-1, reduction="sum")\n'
                        "            loss = summed / (flat != -1).sum()")))),
            ("log_softmax and gather over the kept positions", gpt(
                (LOSS, ("log_probs = F.log_softmax(logits.flatten(0, 1), dim=-1)   # (B * T, vocab_size)\n"
                        "            flat = targets.flatten()\n"
                        "            keep = flat != -1\n"
                        "            loss = -log_probs[keep].gather(1, flat[keep].unsqueeze(1)).mean()")))),
            ("nll_loss of log_softmax", gpt(
                (LOSS, ("loss = F.nll_loss(F.log_softmax(logits, dim=-1).view(B * T, -1), targets.view(B * T), "
                        "ignore_index=-1)")))),
            ("positions by arange, enumerate the blocks, F.linear head", gpt((GPT_BODY, (
                "        positions = torch.arange(start, start + T, device=idx.device)   # (T,)\n"
                "        x = self.drop(self.tok_emb(idx) + self.pos_emb[0, positions])  # (B, T, C)\n"
                "        for i, block in enumerate(self.blocks):\n"
                "            x = block(x, caches[i])\n"
                "        logits = F.linear(self.ln_f(x), self.head.weight)              # (B, T, vocab_size)\n")))),
            ("narrow the position embeddings", gpt(
                ("positions = self.pos_emb[:, start:start + T, :]", "positions = self.pos_emb.narrow(1, start, T)"))),
        ],
        "generate": [
            ("argmax when top_k is 1", generate(
                (TEMPERATURE,
                 ("    if top_k == 1:                                                 # greedy: the largest logit\n"
                  "        return torch.argmax(logits, dim=-1, keepdim=True)          # (B, 1)\n"
                  + TEMPERATURE)))),
            ("top-k by sort, Categorical sampling", generate(
                (TOP_K, ("    if top_k is not None:\n"
                         "        ordered = torch.sort(logits, dim=-1, descending=True).values\n"
                         "        kth = ordered[:, min(top_k, logits.size(-1)) - 1].unsqueeze(-1)   # (B, 1)\n"
                         "        logits = torch.where(logits >= kth, logits,\n"
                         '                             torch.full_like(logits, -float("inf")))\n')),
                (SAMPLE, ("    probs = torch.softmax(logits, dim=-1)\n"
                          "    return torch.distributions.Categorical(probs=probs).sample().unsqueeze(-1)\n")))),
            ("top-k by scatter, temperature after", generate(
                (TEMPERATURE, ""),
                (TOP_K, ("    if top_k is not None:\n"
                         "        values, indices = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1)\n"
                         '        logits = torch.full_like(logits, float("-inf")).scatter(-1, indices, values)\n'
                         "    logits = logits / temperature\n")))),
            ("a draw among the top k, mapped back with gather", generate(
                (TOP_K, ("    if top_k is not None:\n"
                         "        values, indices = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1)\n"
                         "        position = torch.multinomial(F.softmax(values, dim=-1), num_samples=1)   # (B, 1)\n"
                         "        return indices.gather(-1, position)                                    # (B, 1)\n")))),
            ("preallocated output, explicit cropping", generate((GENERATE_LOOP, (
                "    B, T = idx.shape\n"
                "    block_size = model.config.block_size\n"
                "    out = torch.empty(B, T + max_new_tokens, dtype=idx.dtype, device=idx.device)\n"
                "    out[:, :T] = idx\n"
                "    for t in range(T, T + max_new_tokens):\n"
                "        context = out[:, max(0, t - block_size):t]\n"
                "        logits, _ = model(context)\n"
                "        out[:, t:t + 1] = sample_next_token(logits[:, -1, :], temperature, top_k)\n"
                "    return out\n")))),
            ("new tokens in a list, a while loop", generate((GENERATE_LOOP, (
                "    new_tokens = []\n"
                "    while len(new_tokens) < max_new_tokens:\n"
                "        context = torch.cat([idx, *new_tokens], dim=1)\n"
                "        if context.size(1) > model.config.block_size:\n"
                "            context = context[:, context.size(1) - model.config.block_size:]\n"
                "        logits = model(context)[0]\n"
                "        new_tokens.append(sample_next_token(logits[:, -1], temperature=temperature, top_k=top_k))\n"
                "    return torch.cat([idx, *new_tokens], dim=1)\n")))),
        ],
        "kv_cache": [
            ("a counter of the cached tokens", cache(
                "    block_size = model.config.block_size\n"
                "    kv_cache, cached = None, 0\n"
                "    for _ in range(max_new_tokens):\n"
                "        if kv_cache is None or cached == block_size:\n"
                "            kv_cache = [{} for _ in range(len(model.blocks))]\n"
                "            context = idx[:, -block_size:]\n"
                "            cached = context.size(1)\n"
                "            logits, _ = model(context, None, kv_cache)\n"
                "        else:\n"
                "            logits, _ = model(idx[:, -1:], None, kv_cache)\n"
                "            cached += 1\n"
                "        idx = torch.cat([idx, sample_next_token(logits[:, -1, :], temperature, top_k)], dim=1)\n"
                "    return idx\n")),
            ("prefill before the loop", cache(
                "    block_size = model.config.block_size\n"
                "    if max_new_tokens <= 0:\n"
                "        return idx\n"
                "    kv_cache = [{} for _ in model.blocks]\n"
                "    logits, _ = model(idx[:, -block_size:], kv_cache=kv_cache)   # the prompt fills the cache\n"
                "    for step in range(max_new_tokens):\n"
                "        idx = torch.cat([idx, sample_next_token(logits[:, -1, :], temperature, top_k)], dim=1)\n"
                "        if step == max_new_tokens - 1:\n"
                "            break\n"
                "        if kv_cache[0]['k'].shape[-2] == block_size:   # full: restart on the cropped context\n"
                "            kv_cache = [{} for _ in model.blocks]\n"
                "            logits, _ = model(idx[:, -block_size:], kv_cache=kv_cache)\n"
                "        else:\n"
                "            logits, _ = model(idx[:, -1:], kv_cache=kv_cache)\n"
                "    return idx\n")),
            ("new tokens in a list, argmax when greedy", cache(
                "    block_size = model.config.block_size\n"
                "    kv_cache, new_tokens = None, []\n"
                "    while len(new_tokens) < max_new_tokens:\n"
                "        full = kv_cache is not None and kv_cache[0]['k'].size(2) >= block_size\n"
                "        if kv_cache is None or full:\n"
                "            kv_cache = [dict() for _ in model.blocks]\n"
                "            context = torch.cat([idx, *new_tokens], dim=1)[:, -block_size:]\n"
                "        else:\n"
                "            context = new_tokens[-1]\n"
                "        last = model(context, kv_cache=kv_cache)[0][:, -1]       # (B, vocab_size)\n"
                "        if top_k == 1:\n"
                "            new_tokens.append(last.argmax(dim=-1, keepdim=True))\n"
                "        else:\n"
                "            new_tokens.append(sample_next_token(last, temperature, top_k))\n"
                "    return torch.cat([idx, *new_tokens], dim=1)\n")),
        ],
    }


KNOWN_GAPS = {}


def library(answer):
    return {
        "mingpt_attention": [
            ("F.scaled_dot_product_attention", answer("mingpt_attention", (
                "y = att @ v", "y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool())"))),
        ],
    }
