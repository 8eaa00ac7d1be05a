package runstore_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExampleWorker builds examples/go (go vet and go build, as a user's
// module with replace directives) and runs it against every live server.
func TestExampleWorker(t *testing.T) {
	example, err := filepath.Abs(filepath.Join("..", "examples", "go"))
	if err != nil {
		t.Fatal(err)
	}
	binary := filepath.Join(t.TempDir(), "worker")
	for _, args := range [][]string{{"vet", "./..."}, {"build", "-o", binary, "."}} {
		command := exec.CommandContext(t.Context(), "go", args...)
		command.Dir = example
		if output, err := command.CombinedOutput(); err != nil {
			t.Fatalf("go %s in examples/go: %v\n%s", strings.Join(args, " "), err, output)
		}
	}
	forEachBackend(t, func(t *testing.T, target string) {
		command := exec.CommandContext(t.Context(), binary)
		command.Env = append(os.Environ(), "RUNSTORE_TARGET="+target)
		output, err := command.CombinedOutput()
		if err != nil || !strings.Contains(string(output), "inserted=true, retry inserted=false, status RUN_STATUS_COMPLETED") {
			t.Fatalf("the example worker: %v\n%s", err, output)
		}
	})
}
