package api

import "testing"

func TestContentDisposition(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"numbers_and_squares.csv", `attachment; filename="file.csv"; filename*=UTF-8''numbers_and_squares.csv`},
		{"résumé données.csv", `attachment; filename="file.csv"; filename*=UTF-8''r%C3%A9sum%C3%A9%20donn%C3%A9es.csv`},
		{`a"b;c.txt`, `attachment; filename="file.txt"; filename*=UTF-8''a%22b%3Bc.txt`},
		{"chart.PNG", `attachment; filename="file.PNG"; filename*=UTF-8''chart.PNG`},
		{"noext", `attachment; filename="file"; filename*=UTF-8''noext`},
		{".bashrc", `attachment; filename="file"; filename*=UTF-8''.bashrc`},
		{"x.tar.gz", `attachment; filename="file.gz"; filename*=UTF-8''x.tar.gz`},
		{"x.é", `attachment; filename="file"; filename*=UTF-8''x.%C3%A9`},
	} {
		if got := ContentDisposition(tc.name); got != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	for name, want := range map[string]string{"a.csv": "text/csv", "A.PNG": "image/png", "x": "application/octet-stream", "x.unknown": "application/octet-stream"} {
		if got := contentType(name); got != want {
			t.Errorf("contentType(%q) = %q, want %q", name, got, want)
		}
	}
}
