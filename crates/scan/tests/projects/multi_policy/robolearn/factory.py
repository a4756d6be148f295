"""Builds the policy a config names."""


def make_policy(name):
    if name == "act":
        from robolearn.policies.act import ActPolicy

        return ActPolicy()
    elif name == "diffusion":
        from robolearn.policies.diffusion import DiffusionPolicy

        return DiffusionPolicy()
    raise ValueError(f"unknown policy {name!r}")
