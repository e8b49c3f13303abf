# Sourced by run.sh before code-server runs at all: one temporary folder ($WORK) for everything
# the check writes. code-server's first run writes a config.yaml with a generated password into
# $CODE_SERVER_CONFIG, else $XDG_CONFIG_HOME/code-server (default ~/.config), even for --version;
# both point into $WORK, so nothing lands in the user's own folders.
WORK="$(mktemp -d -t ctxd-e2e-XXXXXX)"
export CODE_SERVER_CONFIG="$WORK/config.yaml"
export XDG_CONFIG_HOME="$WORK/xdg-config" XDG_DATA_HOME="$WORK/xdg-data" XDG_STATE_HOME="$WORK/state"
mkdir -p "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$XDG_STATE_HOME"
printf 'bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n' > "$CODE_SERVER_CONFIG"
