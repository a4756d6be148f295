"""Policies, by name."""


def make_policy(name):
    if name == "act":
        from mpp.policies.act import ACTPolicy

        return ACTPolicy()
    from mpp.policies.diffusion import DiffusionPolicy

    return DiffusionPolicy()
