// Command pulumi-config reads a Pulumi project and its stack files with Pulumi's own loaders
// (github.com/pulumi/pulumi/sdk/v3/go/common/workspace, the code `pulumi` runs) and prints, as
// JSON, what the engine would hand the program of each stack: every config value as the CLI
// encodes it for the language host (structured values as JSON text) and the keys that hold
// secrets. Secret values are not decrypted: each reads "[secret]", as `pulumi config` shows it.
//
// Usage: pulumi-config <project directory>
//
// A project or stack file Pulumi refuses makes it exit 1 with Pulumi's own error on stderr.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

type stackConfig struct {
	Config     map[string]string `json:"config"`
	SecretKeys []string          `json:"secretKeys"`
	Warnings   []string          `json:"warnings"`
}

type report struct {
	Project string                 `json:"project"`
	Runtime string                 `json:"runtime"`
	Stacks  map[string]stackConfig `json:"stacks"`
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: pulumi-config <project directory>")
	}
	projectPath := filepath.Join(os.Args[1], "Pulumi.yaml")
	project, err := workspace.LoadProject(projectPath)
	if err != nil {
		fail(err.Error())
	}
	if len(project.Config) > 0 {
		// The CLI merges project-level config into every stack's; that code is not in the SDK.
		fail(fmt.Sprintf("%s: project-level config is not read by this check; set it per stack",
			projectPath))
	}
	pattern := workspace.ProjectStackPath(projectPath, project, "*")
	paths, err := filepath.Glob(pattern)
	if err != nil {
		fail(err.Error())
	}
	out := report{Project: project.Name.String(), Runtime: project.Runtime.Name(),
		Stacks: map[string]stackConfig{}}
	for _, path := range paths {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "Pulumi."), ".yaml")
		out.Stacks[name] = loadStack(project, path)
	}
	encoded, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		fail(err.Error())
	}
	fmt.Println(string(encoded))
}

func loadStack(project *workspace.Project, path string) stackConfig {
	var warnings bytes.Buffer
	sink := diag.DefaultSink(&warnings, &warnings, diag.FormatOptions{Color: colors.Never})
	stack, err := workspace.LoadProjectStack(sink, project, path)
	if err != nil {
		fail(fmt.Sprintf("%s: %v", path, err))
	}
	values, err := stack.Config.Decrypt(config.NewBlindingDecrypter())
	if err != nil {
		fail(fmt.Sprintf("%s: %v", path, err))
	}
	result := stackConfig{Config: map[string]string{}, SecretKeys: []string{}, Warnings: []string{}}
	for key, value := range values {
		result.Config[key.String()] = value
	}
	for _, key := range stack.Config.SecureKeys() {
		result.SecretKeys = append(result.SecretKeys, key.String())
	}
	sort.Strings(result.SecretKeys)
	for _, line := range strings.Split(strings.TrimSpace(warnings.String()), "\n") {
		if line != "" {
			result.Warnings = append(result.Warnings, line)
		}
	}
	return result
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, message)
	os.Exit(1)
}
