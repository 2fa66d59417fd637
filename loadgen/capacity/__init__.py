"""The capacity command: the highest load at which every SLO holds, per target."""
