package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// completionCmd prints a completion script for bash, zsh or fish.
func completionCmd(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return usageError{"gantry completion bash|zsh|fish"}
	}
	// What each command offers as its first argument: a group's
	// subcommands, or its values.
	offers := map[string][]string{}
	var names []string
	for _, c := range commands {
		if c.hidden {
			continue
		}
		names = append(names, c.name)
		for _, s := range c.subs {
			offers[c.name] = append(offers[c.name], s.name)
		}
		offers[c.name] = append(offers[c.name], c.values...)
	}
	sort.Strings(names)
	switch args[0] {
	case "bash", "zsh":
		var cases strings.Builder
		for _, c := range names {
			if subs := offers[c]; len(subs) > 0 {
				fmt.Fprintf(&cases, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return;;\n", c, strings.Join(subs, " "))
			}
		}
		script := fmt.Sprintf(`# gantry completion for bash (zsh: autoload -U bashcompinit && bashcompinit first)
_gantry() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W %q -- "$cur")); return
  fi
  [ "$COMP_CWORD" -eq 2 ] || return
  case "${COMP_WORDS[1]}" in
%s  esac
}
complete -F _gantry gantry
`, strings.Join(names, " "), cases.String())
		if args[0] == "zsh" {
			script = "autoload -U +X bashcompinit && bashcompinit\n" + script
		}
		_, err := io.WriteString(stdout, script)
		return err
	case "fish":
		var b strings.Builder
		b.WriteString("# gantry completion for fish\ncomplete -c gantry -f\n")
		for _, c := range names {
			fmt.Fprintf(&b, "complete -c gantry -n __fish_use_subcommand -a %s\n", c)
			for _, s := range offers[c] {
				fmt.Fprintf(&b, "complete -c gantry -n '__fish_seen_subcommand_from %s' -a %s\n", c, s)
			}
		}
		_, err := io.WriteString(stdout, b.String())
		return err
	}
	return usageError{fmt.Sprintf("no completion for %q: bash, zsh or fish", args[0])}
}
