# Written for this course in the style of minGPT's CausalSelfAttention forward, the lines this
# answer asks for: scores scaled by 1 / sqrt(head size), the causal mask compared with 0 and filled
# with -inf, softmax, attention dropout, the weighted values.
att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
att = att.masked_fill(mask == 0, float("-inf"))
att = self.attn_drop(F.softmax(att, dim=-1))
y = att @ v
