package cli

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T04:21:27Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := versionLine(bi), "switchyard (devel) rev 0123456789ab (2026-12-01T04:21:27Z, modified) go1.26.0"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	bi.Settings = nil
	if got := versionLine(bi); !strings.Contains(got, "no VCS revision") || !strings.Contains(got, "make build") {
		t.Errorf("without VCS settings: %q", got)
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"version"}, nil, &out, &errb); code != ExitOK || !strings.HasPrefix(out.String(), "switchyard ") || !strings.Contains(out.String(), "go1.") {
		t.Errorf("version: exit %d, %q %q", code, out.String(), errb.String())
	}
}
