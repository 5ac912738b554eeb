# Written for this course in the style of a textbook's numerically stable softmax: subtract each
# row's maximum, exponentiate, normalise.
def softmax(z):
    e = torch.exp(z - torch.max(z, dim=-1, keepdim=True)[0])
    return e / torch.sum(e, dim=-1, keepdim=True)
