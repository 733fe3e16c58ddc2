package testsvc

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
)

const minioPkgHint = "MinIO (go install github.com/minio/minio@latest) and put it in PATH or set $MOONCAKE_MINIO_BIN"

// MinIO is a running MinIO server.
type MinIO struct {
	Endpoint  string // "127.0.0.1:port", plain HTTP
	AccessKey string
	SecretKey string
	Region    string // "us-east-1"
}

// StartMinIO starts a single-drive MinIO server with fresh storage in t.TempDir(). The
// binary is $MOONCAKE_MINIO_BIN or minio in PATH; without one the test is skipped.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin := findBinary(t, "minio", "MOONCAKE_MINIO_BIN", minioPkgHint)
	m := &MinIO{AccessKey: "mooncake", SecretKey: "mooncake-secret", Region: "us-east-1"}
	return retryStart(t, "minio", func(int) (*MinIO, error) {
		dir := t.TempDir()
		ports := freePorts(t, 2)
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		env := append(cleanEnv("MINIO_"),
			"MINIO_ROOT_USER="+m.AccessKey,
			"MINIO_ROOT_PASSWORD="+m.SecretKey,
			"MINIO_REGION="+m.Region,
			"MINIO_SITE_REGION="+m.Region,
			"MINIO_BROWSER=off",
			"MINIO_UPDATE=off",
			"HOME="+dir, // MinIO writes its config under $HOME/.minio
		)
		p := &proc{
			name: "minio",
			path: bin,
			args: []string{"server", "--quiet",
				"--address", addr,
				"--console-address", "127.0.0.1:" + strconv.Itoa(ports[1]),
				dir + "/data"},
			env:     env,
			logPath: logFile(dir, "minio"),
		}
		if err := p.launch(func() error { return minioLive(addr) }); err != nil {
			return nil, err
		}
		p.register(t)
		m.Endpoint = addr
		return m, nil
	})
}

func minioLive(addr string) error {
	resp, err := healthClient.Get("http://" + addr + "/minio/health/live")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: /minio/health/live answered %s", errNotReady, resp.Status)
	}
	return nil
}
