# Written for this course in the style of minGPT's CausalSelfAttention (one Linear per role, a
# lower-triangular mask buffer of shape (1, 1, T, T) compared with 0, scaling by 1 / sqrt(head
# size), dropout on the weights, the heads re-assembled side by side), with the names of the
# assignment's API that a student would keep.
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0
        self.num_heads = num_heads
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(d_out, d_out)
        ones = torch.ones(context_length, context_length)
        self.register_buffer("mask", torch.tril(ones).view(1, 1, context_length, context_length))

    def forward(self, x):
        B, T, C = x.size()
        hs = C // self.num_heads
        k = self.W_key(x).view(B, T, self.num_heads, hs).transpose(1, 2)
        q = self.W_query(x).view(B, T, self.num_heads, hs).transpose(1, 2)
        v = self.W_value(x).view(B, T, self.num_heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = F.softmax(att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf")), dim=-1)
        y = self.dropout(att) @ v
        return self.out_proj(y.transpose(1, 2).contiguous().view(B, T, C))
