# Written for this course in the style of the Head of the well-known "let's build GPT from
# scratch" lecture: key, query and value layers, weights scaled by the head size ** -0.5, an
# optional mask filled with -inf, softmax, then the weighted values.
class Head(nn.Module):
    def __init__(self, n_embd, head_size):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size)
        self.query = nn.Linear(n_embd, head_size)
        self.value = nn.Linear(n_embd, n_embd)

    def forward(self, x, mask=None):
        q, k = self.query(x), self.key(x)
        wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        if mask is not None:
            wei = wei.masked_fill(mask == 0, float("-inf"))
        return F.softmax(wei, dim=-1) @ self.value(x)
