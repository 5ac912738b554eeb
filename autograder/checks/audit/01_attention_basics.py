"""Audit bank of assignment 01: each item's catalogued mistakes, and correct answers written
another way (see autograder/commands/audit.py)."""

SOFTMAX = "torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)"
BIAS_LEFT_OUT = (("queries = self.W_query(x)", "queries = x @ self.W_query.weight.T"),
                 ("keys = self.W_key(x)", "keys = x @ self.W_key.weight.T"),
                 ("values = self.W_value(x)", "values = x @ self.W_value.weight.T"))
MASK_SCORES = 'scores = scores.masked_fill(future, float("-inf"))'


def mutants(answer):
    return {
        "softmax_stable": {
            "softmax_wrong_dim": answer("softmax_stable", ("x.amax(dim=-1, keepdim=True)", "x.amax(dim=0, keepdim=True)"),
                                        ("exps.sum(dim=-1, keepdim=True)", "exps.sum(dim=0, keepdim=True)")),
            "softmax_not_shifted": answer("softmax_stable", ("x - x.amax(dim=-1, keepdim=True)", "x")),
            "softmax_over_dim_one": answer("softmax_stable",
                                           ("x.amax(dim=-1, keepdim=True)", "x.amax(dim=1, keepdim=True)"),
                                           ("exps.sum(dim=-1, keepdim=True)", "exps.sum(dim=1, keepdim=True)")),
        },
        "context_vectors": {
            "softmax_wrong_dim": answer("context_vectors", ("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=0)")),
            "squeezed_size_one": answer("context_vectors", ("return weights @ inputs",
                                                          "return (weights @ inputs).squeeze()")),
        },
        "self_attention_v1": {
            "softmax_wrong_dim": answer("self_attention_v1", (SOFTMAX + "   #", "torch.softmax(scores / keys.shape[-1] ** 0.5, dim=0)   #")),
            "no_scaling": answer("self_attention_v1", (SOFTMAX + "   #", "torch.softmax(scores, dim=-1)   #")),
            "squeezed_size_one": answer("self_attention_v1", ("return weights @ values",
                                                            "return (weights @ values).squeeze()")),
        },
        "self_attention_v2": {
            "softmax_wrong_dim": answer("self_attention_v2", (SOFTMAX + "   #", "torch.softmax(scores / keys.shape[-1] ** 0.5, dim=0)   #")),
            "no_scaling": answer("self_attention_v2", (SOFTMAX + "   #", "torch.softmax(scores, dim=-1)   #")),
            "scaled_by_sequence_length": answer("self_attention_v2", ("scores / keys.shape[-1] ** 0.5",
                                                                      "scores / keys.shape[0] ** 0.5")),
            "bias_left_out": answer("self_attention_v2", *BIAS_LEFT_OUT),
            "squeezed_size_one": answer("self_attention_v2", ("return weights @ values",
                                                            "return (weights @ values).squeeze()")),
        },
        "transfer_weights": {
            "transfer_without_transpose": answer("transfer_weights", ("sa_v2.W_query.weight.T", "sa_v2.W_query.weight"),
                                                 ("sa_v2.W_key.weight.T", "sa_v2.W_key.weight"),
                                                 ("sa_v2.W_value.weight.T", "sa_v2.W_value.weight")),
        },
        "causal_attention": {
            "softmax_wrong_dim": answer("causal_attention", ("dim=-1)   # (b, T, T), over the keys",
                                                             "dim=1)   # (b, T, T)")),
            "no_scaling": answer("causal_attention", (SOFTMAX, "torch.softmax(scores, dim=-1)")),
            "scaled_by_sequence_length": answer("causal_attention", ("scores / keys.shape[-1] ** 0.5",
                                                                     "scores / keys.shape[1] ** 0.5")),
            "bias_left_out": answer("causal_attention", *BIAS_LEFT_OUT),
            "mask_filled_with_zero": answer("causal_attention", ('masked_fill(future, float("-inf"))',
                                                                 "masked_fill(future, 0.0)")),
            "mask_hides_diagonal": answer("causal_attention", ("diagonal=1).bool()", "diagonal=0).bool()")),
            "mask_leaks_next_token": answer("causal_attention", ("diagonal=1).bool()", "diagonal=2).bool()")),
            "mask_after_softmax": answer("causal_attention", (MASK_SCORES, "scores = scores + 0.0"),
                                         ("weights = self.dropout(weights)",
                                          "weights = self.dropout(weights.masked_fill(future, 0.0))")),
            "dropout_in_eval": answer("causal_attention", ("weights = self.dropout(weights)",
                                                           "weights = torch.nn.functional.dropout(weights, 0.5)")),
            "dropout_in_eval: at the module's rate": answer("causal_attention", (
                "weights = self.dropout(weights)", "weights = torch.nn.functional.dropout(weights, self.dropout.p)")),
        },
        "multihead_wrapper": {
            "heads_concatenated_on_tokens": answer("multihead_wrapper", ("for head in self.heads], dim=-1)",
                                                                         "for head in self.heads], dim=1)")),
            "squeezed_size_one": answer("multihead_wrapper", ("for head in self.heads], dim=-1)",
                                                            "for head in self.heads], dim=-1).squeeze()")),
        },
        "two_dim_wrapper": {
            "wrapper_width_not_per_head": answer("two_dim_wrapper", ("MultiHeadAttentionWrapper(d_in, 1,",
                                                                     "MultiHeadAttentionWrapper(d_in, 2,")),
        },
        "multihead_attention": {
            "softmax_wrong_dim": answer("multihead_attention", ("dim=-1)   # (b, H, T, T), over the keys",
                                                                "dim=2)   # (b, H, T, T)")),
            "no_scaling": answer("multihead_attention", ("torch.softmax(scores / self.head_dim ** 0.5, dim=-1)",
                                                         "torch.softmax(scores, dim=-1)")),
            "scaled_by_model_width": answer("multihead_attention", ("scores / self.head_dim ** 0.5",
                                                                    "scores / self.d_out ** 0.5")),
            "mask_filled_with_zero": answer("multihead_attention", ('masked_fill(future, float("-inf"))',
                                                                    "masked_fill(future, 0.0)")),
            "mask_hides_diagonal": answer("multihead_attention", ("diagonal=1).bool()", "diagonal=0).bool()")),
            "mask_leaks_next_token": answer("multihead_attention", ("diagonal=1).bool()", "diagonal=2).bool()")),
            "mask_after_softmax": answer("multihead_attention", (MASK_SCORES, "scores = scores + 0.0"),
                                         ("weights = self.dropout(weights)",
                                          "weights = self.dropout(weights.masked_fill(future, 0.0))")),
            "split_heads_without_transpose": answer(
                "multihead_attention",
                ("queries = self.W_query(x).view(split).transpose(1, 2)",
                 "queries = self.W_query(x).view(b, self.num_heads, num_tokens, self.head_dim)"),
                ("keys = self.W_key(x).view(split).transpose(1, 2)",
                 "keys = self.W_key(x).view(b, self.num_heads, num_tokens, self.head_dim)"),
                ("values = self.W_value(x).view(split).transpose(1, 2)",
                 "values = self.W_value(x).view(b, self.num_heads, num_tokens, self.head_dim)")),
            "merge_heads_without_transpose": answer(
                "multihead_attention", ("context = (weights @ values).transpose(1, 2)", "context = weights @ values")),
            "missing_output_projection": answer("multihead_attention", ("return self.out_proj(context)",
                                                                        "return context")),
            "bias_left_out": answer("multihead_attention", ("self.W_query(x).view", "(x @ self.W_query.weight.T).view"),
                                    ("self.W_key(x).view", "(x @ self.W_key.weight.T).view"),
                                    ("self.W_value(x).view", "(x @ self.W_value.weight.T).view")),
            "squeezed_size_one": answer("multihead_attention", ("return self.out_proj(context)",
                                                              "return self.out_proj(context).squeeze()")),
            "heads_not_checked": answer("multihead_attention", (
                "        if d_out % num_heads != 0:\n"
                '            raise ValueError(f"d_out={d_out} is not divisible by num_heads={num_heads}")\n', "")),
            "dropout_in_eval": answer("multihead_attention", ("weights = self.dropout(weights)",
                                                              "weights = torch.nn.functional.dropout(weights, 0.5)")),
            "dropout_in_eval: at the module's rate": answer("multihead_attention", (
                "weights = self.dropout(weights)", "weights = torch.nn.functional.dropout(weights, self.dropout.p)")),
        },
    }


def alternatives(answer):
    return {
        "softmax_stable": [
            ("max instead of amax", answer("softmax_stable", ("x.amax(dim=-1, keepdim=True)",
                                                              "x.max(dim=-1, keepdim=True).values"))),
            ("exp method, sum over the last dim by index", answer(
                "softmax_stable", ("torch.exp(shifted)", "shifted.exp()"),
                ("exps.sum(dim=-1, keepdim=True)", "exps.sum(dim=x.dim() - 1, keepdim=True)"))),
            ("logsumexp", answer("softmax_stable", ("exps = torch.exp(shifted)", "exps = None"),
                                 ("return exps / exps.sum(dim=-1, keepdim=True)",
                                  "return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))"))),
        ],
        "context_vectors": [
            ("einsum", answer("context_vectors", ("inputs @ inputs.T", "torch.einsum('id,jd->ij', inputs, inputs)"))),
            ("matmul and transpose", answer("context_vectors", ("inputs @ inputs.T",
                                                                "torch.matmul(inputs, inputs.transpose(0, 1))"))),
            ("softmax as a method, dim=1 of a 2-D tensor", answer("context_vectors", ("torch.softmax(scores, dim=-1)",
                                                                                      "scores.softmax(dim=1)"))),
        ],
        "self_attention_v1": [
            ("einsum", answer("self_attention_v1", ("queries @ keys.T", "torch.einsum('qd,kd->qk', queries, keys)"))),
            ("scale by sqrt of d_out", answer("self_attention_v1", ("scores / keys.shape[-1] ** 0.5",
                                                                    "scores / torch.tensor(float(self.d_out)).sqrt()"))),
            ("scale the queries first", answer("self_attention_v1", ("queries = x @ self.W_query",
                                                                     "queries = x @ self.W_query / keys_width"),
                                               ("scores / keys.shape[-1] ** 0.5", "scores"),
                                               ("        queries = x", "        keys_width = self.d_out ** 0.5\n"
                                                                      "        queries = x"))),
        ],
        "self_attention_v2": [
            ("einsum", answer("self_attention_v2", ("queries @ keys.T", "torch.einsum('qd,kd->qk', queries, keys)"))),
            ("transpose(0, 1)", answer("self_attention_v2", ("queries @ keys.T", "queries @ keys.transpose(0, 1)"))),
            ("float64 inside", answer("self_attention_v2", ("return weights @ values",
                                                            "return (weights.double() @ values.double()).float()"))),
        ],
        "transfer_weights": [
            ("Parameter assignment", answer("transfer_weights", (
                "    with torch.no_grad():\n"
                "        sa_v1.W_query.copy_(sa_v2.W_query.weight.T)   # (d_out, d_in).T -> (d_in, d_out)\n"
                "        sa_v1.W_key.copy_(sa_v2.W_key.weight.T)\n"
                "        sa_v1.W_value.copy_(sa_v2.W_value.weight.T)",
                "    sa_v1.W_query = torch.nn.Parameter(sa_v2.W_query.weight.detach().T.clone())\n"
                "    sa_v1.W_key = torch.nn.Parameter(sa_v2.W_key.weight.detach().T.clone())\n"
                "    sa_v1.W_value = torch.nn.Parameter(sa_v2.W_value.weight.detach().T.clone())"))),
            ("data attribute", answer("transfer_weights", (
                "    with torch.no_grad():\n"
                "        sa_v1.W_query.copy_(sa_v2.W_query.weight.T)   # (d_out, d_in).T -> (d_in, d_out)\n"
                "        sa_v1.W_key.copy_(sa_v2.W_key.weight.T)\n"
                "        sa_v1.W_value.copy_(sa_v2.W_value.weight.T)",
                "    for name in ('W_query', 'W_key', 'W_value'):\n"
                "        getattr(sa_v1, name).data = getattr(sa_v2, name).weight.data.t().clone()"))),
            ("transpose(0, 1)", answer("transfer_weights", ("sa_v2.W_query.weight.T", "sa_v2.W_query.weight.transpose(0, 1)"),
                                       ("sa_v2.W_key.weight.T", "sa_v2.W_key.weight.transpose(0, 1)"),
                                       ("sa_v2.W_value.weight.T", "sa_v2.W_value.weight.transpose(0, 1)"))),
        ],
        "causal_attention": [
            ("tril mask, filled where it is 0", answer(
                "causal_attention",
                ("future = torch.triu(torch.ones(context_length, context_length), diagonal=1).bool()",
                 "future = torch.tril(torch.ones(context_length, context_length)) == 0"))),
            ("a large negative fill", answer("causal_attention", ('masked_fill(future, float("-inf"))',
                                                                  "masked_fill(future, -1e9)"))),
            ("mask added as -inf", answer("causal_attention", (
                'scores = scores.masked_fill(future, float("-inf"))',
                'scores = scores + torch.zeros_like(scores).masked_fill(future, float("-inf"))'))),
            ("mask after the softmax, renormalised", answer(
                "causal_attention",
                ('scores = scores.masked_fill(future, float("-inf"))', "scores = scores - scores.amax(-1, keepdim=True)"),
                ("weights = self.dropout(weights)",
                 "weights = weights.masked_fill(future, 0.0)\n"
                 "        weights = weights / weights.sum(dim=-1, keepdim=True)\n"
                 "        weights = self.dropout(weights)"))),
        ],
        "multihead_wrapper": [
            ("a loop", answer("multihead_wrapper", ("return torch.cat([head(x) for head in self.heads], dim=-1)",
                                                    "outputs = []\n        for head in self.heads:\n"
                                                    "            outputs.append(head(x))\n"
                                                    "        return torch.cat(outputs, dim=2)"))),
            ("stack and flatten", answer("multihead_wrapper", (
                "return torch.cat([head(x) for head in self.heads], dim=-1)",
                "return torch.stack([head(x) for head in self.heads], dim=2).flatten(2)"))),
            ("map over the heads", answer("multihead_wrapper", (
                "return torch.cat([head(x) for head in self.heads], dim=-1)",
                "return torch.cat(list(map(lambda head: head(x), self.heads)), dim=-1)"))),
        ],
        "two_dim_wrapper": [
            ("keywords", answer("two_dim_wrapper", (
                "return MultiHeadAttentionWrapper(d_in, 1, context_length, dropout, num_heads=2)",
                "return MultiHeadAttentionWrapper(d_in=d_in, d_out=1, context_length=context_length, dropout=dropout,\n"
                "                                     num_heads=2)"))),
            ("width computed from the heads", answer("two_dim_wrapper", (
                "return MultiHeadAttentionWrapper(d_in, 1, context_length, dropout, num_heads=2)",
                "num_heads, features = 2, 2\n"
                "    return MultiHeadAttentionWrapper(d_in, features // num_heads, context_length, dropout, num_heads)"))),
            ("built, then returned", answer("two_dim_wrapper", (
                "return MultiHeadAttentionWrapper(d_in, 1, context_length, dropout, num_heads=2)",
                "wrapper = MultiHeadAttentionWrapper(d_in, 1, context_length, dropout, 2)\n    return wrapper"))),
        ],
        "multihead_attention": [
            ("reshape for view", answer("multihead_attention",
                                        ("context.contiguous().view(b, num_tokens, self.d_out)",
                                         "context.reshape(b, num_tokens, self.d_out)"))),
            ("einsum scores", answer("multihead_attention", ("queries @ keys.transpose(2, 3)",
                                                             "torch.einsum('bhqd,bhkd->bhqk', queries, keys)"))),
            ("scale the queries first", answer("multihead_attention",
                                               ("scores = queries @ keys.transpose(2, 3)",
                                                "scores = (queries / self.head_dim ** 0.5) @ keys.transpose(2, 3)"),
                                               ("torch.softmax(scores / self.head_dim ** 0.5, dim=-1)",
                                                "torch.softmax(scores, dim=-1)"))),
            ("a large negative fill", answer("multihead_attention", ('masked_fill(future, float("-inf"))',
                                                                     "masked_fill(future, torch.finfo(scores.dtype).min)"))),
        ],
    }


KNOWN_GAPS = {}


def library(answer):
    sdpa_by_name = "torch.nn.functional.scaled_dot_product_attention"
    sdpa_by_getattr = 'getattr(torch.nn.functional, "scaled_dot_" + "product_attention")'
    return {
        "softmax_stable": [
            ("torch.softmax", answer("softmax_stable", ("return exps / exps.sum(dim=-1, keepdim=True)",
                                                        "return torch.softmax(x, dim=-1)"))),
            ("softmax by getattr", answer("softmax_stable", ("return exps / exps.sum(dim=-1, keepdim=True)",
                                                             'return getattr(torch, "soft" + "max")(x, dim=-1)'))),
        ],
        "causal_attention": [
            ("SDPA with is_causal=True", answer("causal_attention", (
                "return weights @ values", f"return {sdpa_by_name}(queries, keys, values, is_causal=True)"))),
        ],
        "multihead_attention": [
            ("SDPA by getattr", answer("multihead_attention", (
                "context = (weights @ values).transpose(1, 2)",
                f"context = {sdpa_by_getattr}(queries, keys, values, is_causal=True).transpose(1, 2)"))),
        ],
    }
