package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// ReferenceDir is where the command reference lives in the repository.
const ReferenceDir = "docs/cli"

// ReferencePages are the pages of the command reference, by file name: one
// Markdown page per command (capstan.md, capstan_up.md, ...) with its
// synopsis, description, examples, flags and subcommands. `capstan
// kubectl` is kubectl, whose own commands kubectl's reference documents:
// its page stops there.
func ReferencePages() map[string][]byte {
	pages := map[string][]byte{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		pages[pageName(c)] = referencePage(c)
		if c.Name() == "kubectl" && c.HasParent() {
			return
		}
		for _, sub := range visibleCommands(c) {
			walk(sub)
		}
	}
	walk(NewRootCommand(nil, nil))
	return pages
}

// WriteReference writes the command reference into dir, removing the
// pages of commands that are gone.
func WriteReference(dir string) error {
	pages := ReferencePages()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if _, ok := pages[filepath.Base(p)]; !ok {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	for name, content := range pages {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func pageName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
}

func visibleCommands(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, sub := range c.Commands() {
		if !sub.Hidden && sub.IsAvailableCommand() && sub.Name() != "help" {
			out = append(out, sub)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

func referencePage(c *cobra.Command) []byte {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# %s\n\n", c.CommandPath())
	p("<!-- Generated from the commands by `go run ./hack/clidocs`: do not edit. -->\n\n")
	if c.Short != "" {
		p("%s.\n\n", strings.TrimSuffix(c.Short, "."))
	}
	if c.Runnable() {
		p("```\n%s\n```\n\n", c.UseLine())
	}
	if long := strings.TrimSpace(c.Long); long != "" {
		p("```\n%s\n```\n\n", long)
	}
	if ex := strings.TrimSpace(c.Example); ex != "" {
		p("## Examples\n\n```\n%s\n```\n\n", ex)
	}
	if fs := c.NonInheritedFlags(); fs.HasAvailableFlags() {
		p("## Flags\n\n```\n%s```\n\n", fs.FlagUsagesWrapped(100))
	}
	if fs := c.InheritedFlags(); fs.HasAvailableFlags() {
		p("## Flags of the parent commands\n\n```\n%s```\n\n", fs.FlagUsagesWrapped(100))
	}
	if subs := visibleCommands(c); len(subs) > 0 && !(c.Name() == "kubectl" && c.HasParent()) {
		p("## Commands\n\n")
		for _, sub := range subs {
			p("- [%s](%s): %s\n", sub.CommandPath(), pageName(sub), sub.Short)
		}
		p("\n")
	}
	if c.HasParent() {
		p("Part of [%s](%s).\n", c.Parent().CommandPath(), pageName(c.Parent()))
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}
