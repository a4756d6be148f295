"""A flat reader of the YAML subset the configs use: nested keys joined with dots."""


def load_config(path):
    values, parents = {}, []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#")[0].rstrip()
            if not line.strip():
                continue
            depth = (len(line) - len(line.lstrip())) // 2
            key, _, value = line.strip().partition(":")
            parents = parents[:depth] + [key]
            if value.strip():
                values[".".join(parents)] = value.strip()
    return values
