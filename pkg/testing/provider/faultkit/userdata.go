package faultkit

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"strings"
)

// UserDataEnv reads the settings file the operator's cloud-config part of
// an instance's user-data writes (docs/aws.md: PROXY_PORT,
// PROXY_AUTH_USERNAME, …), as cloud-init and then a shell would, so a
// test can run the proxy the instance would run.
func UserDataEnv(userData string) (map[string]string, error) {
	content, err := UserDataEnvFile(userData)
	if err != nil {
		return nil, err
	}
	return parseEnv(content)
}

// UserDataEnvFile is the content of that settings file, as written.
func UserDataEnvFile(userData string) (string, error) {
	msg, err := mail.ReadMessage(strings.NewReader(userData))
	if err != nil {
		return "", fmt.Errorf("user-data is no MIME message: %w", err)
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		return "", fmt.Errorf("user-data's Content-Type: %w", err)
	}
	parts := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := parts.NextPart()
		if err == io.EOF {
			return "", fmt.Errorf("user-data has no proxy-operator.cfg part")
		}
		if err != nil {
			return "", err
		}
		if part.FileName() != "proxy-operator.cfg" {
			continue
		}
		body, err := io.ReadAll(part)
		if err != nil {
			return "", err
		}
		var doc struct {
			WriteFiles []struct{ Path, Content string } `json:"write_files"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(string(body), "#cloud-config\n")), &doc); err != nil || len(doc.WriteFiles) != 1 {
			return "", fmt.Errorf("proxy-operator.cfg is not one write_files entry (%v)", err)
		}
		return doc.WriteFiles[0].Content, nil
	}
}

// parseEnv reads NAME='value' lines, single-quoted as a POSIX shell reads
// them ('\” for a quote).
func parseEnv(content string) (map[string]string, error) {
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(content), "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("env line %q has no =", line)
		}
		if strings.HasPrefix(value, "'") {
			if !strings.HasSuffix(value, "'") || len(value) < 2 {
				return nil, fmt.Errorf("env %s: unterminated quote", name)
			}
			value = strings.ReplaceAll(value[1:len(value)-1], `'\''`, "'")
		}
		env[name] = value
	}
	return env, nil
}
