"""Audit bank of assignment 02: each item's catalogued mistakes, and correct answers written
another way (see autograder/commands/audit.py).

Two answer cells carry five items: ``self_attention`` (``self_attention_init`` and
``self_attention_forward``) and ``multihead_self_attention`` (``mha_scores``, task 2.1, with the
softmax of task 2.3 that normalises those scores; ``mha_causal_mask``, task 2.2;
``mha_output``, task 2.3). ``self_attention_init`` only builds layers: when they are wrong,
``self_attention_forward`` is graded with the course's layers under the student's ``forward``
(the stand-in), so a mistake in them costs the constructor alone.
``SelfAttention`` has one head, no mask, no projection and no dropout: of the catalogue, only
the softmax's dimension, the scaling and a squeezed result can go wrong there.
"""

SA = "self_attention"
MHA = "multihead_self_attention"

# Lines of the multi-head answer, without their shape comments (each occurs once).
SPLIT = {name: f"{name} = self.{name}(x).view(heads).transpose(1, 2).reshape(folded)" for name in "qkv"}
SCORES = "scores = q @ k.transpose(1, 2) / self.scale"
FUTURE = "future = torch.triu(torch.ones(seq, seq, device=scores.device), diagonal=1).bool()"
FILL = 'scores = scores.masked_fill(future, float("-inf"))'
SOFTMAX = "probs = torch.softmax(scores, dim=-1)"
DROPOUT = "probs = self.dropout(probs)"
WEIGHTED = "att = probs @ v"
MERGE = "att = att.transpose(1, 2).reshape(bs, seq, -1)"
MIX = "att = self.mix(att)"
RAISE = ("        if hidden % num_heads != 0:\n"
         "            raise ValueError(f\"hidden={hidden} is not divisible by num_heads={num_heads}: \"\n"
         "                             f\"every head needs the same number of features\")\n")


def mutants(answer):
    return {
        "self_attention_init": {
            "linear_sizes_swapped": answer(SA, *((f"self.{name} = nn.Linear(input_size, hidden)",
                                                  f"self.{name} = nn.Linear(hidden, input_size)") for name in "qkv")),
            "layers_without_bias": answer(SA, *((f"self.{name} = nn.Linear(input_size, hidden)",
                                                 f"self.{name} = nn.Linear(input_size, hidden, bias=False)")
                                                for name in "qkv")),
        },
        "self_attention_forward": {
            "softmax_wrong_dim": answer(SA, ("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=1)")),
            "no_scaling": answer(SA, ("scores = q @ k.transpose(1, 2) / self.scale",
                                      "scores = q @ k.transpose(1, 2)")),
            "scaled_by_input_width": answer(SA, ("self.scale = hidden ** 0.5", "self.scale = input_size ** 0.5")),
            "squeezed_size_one": answer(SA, ("return probs @ v", "return (probs @ v).squeeze()")),
        },
        "mha_scores": {
            "softmax_wrong_dim": answer(MHA, (SOFTMAX, "probs = torch.softmax(scores, dim=1)")),
            "no_scaling": answer(MHA, (SCORES, "scores = q @ k.transpose(1, 2)")),
            "scaled_by_model_width": answer(MHA, (SCORES, "scores = q @ k.transpose(1, 2) / self.q.out_features ** 0.5")),
            "split_heads_without_transpose": answer(
                MHA, *((SPLIT[name], f"{name} = self.{name}(x).view(bs, self.num_heads, seq, self.head_size)"
                                     f".reshape(folded)") for name in "qkv")),
            # what forward returns, squeezed
            "squeezed_size_one": answer(MHA, (MIX, MIX + "\n        att, probs = att.squeeze(), probs.squeeze()")),
        },
        "mha_causal_mask": {
            "mask_filled_with_zero": answer(MHA, (FILL, "scores = scores.masked_fill(future, 0.0)")),
            "mask_hides_diagonal": answer(MHA, ("diagonal=1).bool()", "diagonal=0).bool()")),
            "mask_leaks_next_token": answer(MHA, ("diagonal=1).bool()", "diagonal=2).bool()")),
            "mask_after_softmax": answer(MHA, (FILL, "scores = scores + 0.0"),
                                         (SOFTMAX, SOFTMAX + "\n        if self.causal:\n"
                                                   "            probs = probs.masked_fill(future, 0.0)")),
            # the mask of the keys a query may see (tril), filled where it is True
            "inverted_mask": answer(MHA, (FUTURE, "future = torch.tril(torch.ones(seq, seq, device=scores.device)).bool()")),
        },
        "mha_output": {
            "merge_heads_without_transpose": answer(MHA, (MERGE, "att = att.reshape(bs, seq, -1)")),
            "missing_output_projection": answer(
                MHA, ("        att = self.mix(att)                     # (bs, seq, hidden) -> (bs, seq, hidden)\n", "")),
            "dropout_in_eval": answer(MHA, (DROPOUT, "probs = F.dropout(probs, self.dropout.p)")),
            "heads_not_checked": answer(MHA, (RAISE, "")),
        },
    }


def alternatives(answer):
    return {
        "self_attention_init": [
            ("keyword arguments", answer(
                SA, *((f"self.{name} = nn.Linear(input_size, hidden)",
                       f"self.{name} = nn.Linear(in_features=input_size, out_features=hidden, bias=True)")
                      for name in "qkv"))),
            ("layers made in a loop with setattr", answer(
                SA, ("self.q = nn.Linear(input_size, hidden)   # weight (hidden, input_size), bias (hidden,)\n"
                     "        self.k = nn.Linear(input_size, hidden)   # weight (hidden, input_size), bias (hidden,)\n"
                     "        self.v = nn.Linear(input_size, hidden)   # weight (hidden, input_size), bias (hidden,)",
                     "for name in (\"q\", \"k\", \"v\"):\n"
                     "            setattr(self, name, nn.Linear(input_size, hidden))"))),
            ("add_module, scale by math.sqrt", answer(
                SA, ("class SelfAttention(nn.Module):", "import math\n\n\nclass SelfAttention(nn.Module):"),
                *((f"self.{name} = nn.Linear(input_size, hidden)",
                   f"self.add_module(\"{name}\", nn.Linear(input_size, hidden))") for name in "qkv"),
                ("self.scale = hidden ** 0.5", "self.scale = math.sqrt(hidden)"))),
        ],
        "self_attention_forward": [
            ("einsum scores", answer(SA, ("q @ k.transpose(1, 2) / self.scale",
                                          "torch.einsum(\"bqd,bkd->bqk\", q, k) / self.scale"))),
            ("scale the queries first, bmm and mT", answer(SA, ("q @ k.transpose(1, 2) / self.scale",
                                                                "torch.bmm(q / self.scale, k.mT)"))),
            ("stable softmax by hand", answer(
                SA, ("probs = torch.softmax(scores, dim=-1)",
                     "exps = (scores - scores.amax(dim=-1, keepdim=True)).exp()\n"
                     "        probs = exps / exps.sum(dim=-1, keepdim=True)"))),
            ("float64 inside", answer(SA, ("probs = torch.softmax(scores, dim=-1)",
                                           "probs = torch.softmax(scores.double(), dim=-1)"),
                                      ("return probs @ v", "return (probs @ v.double()).float()"))),
            ("a loop over the sequences", answer(SA, ("return probs @ v",
                                                      "return torch.stack([p @ w for p, w in zip(probs, v)])"))),
        ],
        "mha_scores": [
            ("einsum scores", answer(MHA, (SCORES, "scores = torch.einsum(\"nqd,nkd->nqk\", q, k) / self.scale"))),
            ("scale the queries first", answer(MHA, (SCORES, "scores = (q / self.scale) @ k.transpose(1, 2)"))),
            ("reshape and permute", answer(
                MHA, *((SPLIT[name], f"{name} = self.{name}(x).reshape(heads).permute(0, 2, 1, 3).reshape(folded)")
                       for name in "qkv"))),
            ("unflatten and flatten", answer(
                MHA, *((SPLIT[name], f"{name} = self.{name}(x).unflatten(-1, (self.num_heads, self.head_size))"
                                     f".transpose(1, 2).flatten(0, 1)") for name in "qkv"))),
            ("heads cut by slicing in a loop", answer(
                MHA, (SPLIT["q"], "cuts = [slice(h * self.head_size, (h + 1) * self.head_size) "
                                  "for h in range(self.num_heads)]\n"
                                  "        q = torch.stack([self.q(x)[..., cut] for cut in cuts], dim=1).reshape(folded)"),
                *((SPLIT[name], f"{name} = torch.stack([self.{name}(x)[..., cut] for cut in cuts], dim=1)"
                                f".reshape(folded)") for name in "kv"))),
            ("scores per head and sequence in a loop", answer(
                MHA, (SCORES, "scores = torch.stack([q[n] @ k[n].T for n in range(q.shape[0])]) / self.scale"))),
            ("float64 scores", answer(
                MHA, (SCORES, "scores = (q.double() @ k.double().transpose(1, 2) / self.scale).float()"))),
        ],
        "mha_causal_mask": [
            ("tril mask, filled where it is 0", answer(
                MHA, (FUTURE, "future = torch.tril(torch.ones(seq, seq, device=scores.device)) == 0"))),
            ("the lowest float as the fill", answer(
                MHA, (FILL, "scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)"))),
            ("mask added as -inf", answer(
                MHA, (FILL, "scores = scores + torch.zeros(seq, seq).masked_fill(future, float(\"-inf\"))"))),
            ("arange comparison and torch.where", answer(
                MHA, (FUTURE, "future = torch.arange(seq)[None, :] > torch.arange(seq)[:, None]"),
                (FILL, "scores = torch.where(future, float(\"-inf\"), scores)"))),
            ("mask after the softmax, renormalised", answer(
                MHA, (FILL, "scores = scores - scores.amax(dim=-1, keepdim=True)"),
                (SOFTMAX, SOFTMAX + "\n"
                          "        if self.causal:\n"
                          "            probs = probs.masked_fill(future, 0.0)\n"
                          "            probs = probs / probs.sum(dim=-1, keepdim=True)"))),
        ],
        "mha_output": [
            ("einsum weighted values", answer(MHA, (WEIGHTED, "att = torch.einsum(\"nqk,nkd->nqd\", probs, v)"))),
            ("permute and a contiguous view", answer(
                MHA, (MERGE, "att = att.permute(0, 2, 1, 3).contiguous().view(bs, seq, -1)"))),
            ("heads concatenated in a loop", answer(
                MHA, (MERGE, "att = torch.cat([att[:, h] for h in range(self.num_heads)], dim=-1)"))),
            ("functional dropout and linear", answer(
                MHA, (DROPOUT, "probs = F.dropout(probs, self.dropout.p, training=self.training)"),
                (MIX, "att = F.linear(att, self.mix.weight, self.mix.bias)"))),
            ("float64 weighted values", answer(MHA, (WEIGHTED, "att = (probs.double() @ v.double()).float()"))),
            ("the ValueError after the layers", answer(
                MHA, (RAISE, ""),
                ("        self.head_size = hidden // num_heads\n",
                 "        self.head_size = hidden // num_heads\n"
                 "        if self.head_size * num_heads != hidden:\n"
                 "            raise ValueError(f\"{num_heads} heads cannot share {hidden} features equally\")\n"))),
        ],
    }


KNOWN_GAPS = {}


def library(answer):
    return {
        "mha_output": [
            ("SDPA for the weighted values", answer(MHA, (WEIGHTED, "att = F.scaled_dot_product_attention(q, k, v, "
                                                                    "is_causal=self.causal)"))),
        ],
    }
