package runstore

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// tokenSource gives the bearer token of one attempt.
type tokenSource interface {
	token() (string, error)
}

type staticToken string

func (t staticToken) token() (string, error) { return string(t), nil }

// cleanToken drops surrounding whitespace (a file's newline) and refuses what
// cannot travel in a gRPC header (docs/security.md#tokens).
func cleanToken(raw, source string) (string, error) {
	token := strings.TrimSpace(raw)
	if token == "" {
		return "", fmt.Errorf("runstore: %s is empty", source)
	}
	for position, character := range token {
		if character < ' ' || character > '~' {
			return "", fmt.Errorf("runstore: %s has a control or non-ASCII character (%q at position %d); a token is printable ASCII",
				source, character, position)
		}
	}
	return token, nil
}

// tokenFile re-reads its file when its size or modification time changed.
type tokenFile struct {
	path    string
	mu      sync.Mutex
	size    int64
	modTime time.Time
	current string
}

func newTokenFile(path string) (*tokenFile, error) {
	file := &tokenFile{path: path}
	if _, err := file.token(); err != nil {
		return nil, err
	}
	return file, nil
}

func (f *tokenFile) token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("runstore: token file: %w", err)
	}
	if f.current != "" && info.Size() == f.size && info.ModTime().Equal(f.modTime) {
		return f.current, nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("runstore: token file: %w", err)
	}
	token, err := cleanToken(string(data), "token file "+f.path)
	if err != nil {
		return "", err
	}
	f.current, f.size, f.modTime = token, info.Size(), info.ModTime()
	return token, nil
}
