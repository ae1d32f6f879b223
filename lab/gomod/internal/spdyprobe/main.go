// Command spdyprobe exercises catamaran.vk.kubelet.spdy (Python) with the SPDY/3.1 implementation
// kube-apiserver uses towards kubelets: k8s.io/streaming/pkg/httpstream/spdy over
// github.com/moby/spdystream. tests/integration/test_spdy_interop.py builds and drives it.
//
//	spdyprobe client HOST:PORT   dial a Python SpdySession server and run the scenarios below
//	spdyprobe server             listen on 127.0.0.1, print "LISTENING HOST:PORT", serve one connection
//
// Each stream names its scenario in a "scenario" header. The probe exits 0 when every check passed,
// else non-zero with the reason on stderr.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/moby/spdystream"
	"k8s.io/streaming/pkg/httpstream"
	streamspdy "k8s.io/streaming/pkg/httpstream/spdy"
)

const (
	bigSize     = 16 << 20 // several MiB each way: far beyond SPDY's 64 KiB initial window
	bigWrite    = 1 << 20  // spdystream sends one DATA frame per Write: 1 MiB frames
	concurrency = 50
)

func main() {
	time.AfterFunc(90*time.Second, func() { fail("timed out after 90s") })
	if len(os.Args) == 3 && os.Args[1] == "client" {
		runClient(os.Args[2])
	} else if len(os.Args) == 2 && os.Args[1] == "server" {
		runServer()
	} else {
		fail("usage: spdyprobe client HOST:PORT | spdyprobe server")
	}
	fmt.Println("OK")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "spdyprobe: "+format+"\n", args...)
	os.Exit(1)
}

func check(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// pattern is the bytes both sides agree on for bulk transfers: i mod 251.
func pattern(size int) []byte {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i % 251)
	}
	return data
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func writeAll(stream io.Writer, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), bigWrite)
		if _, err := stream.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// --- client: the probe plays kube-apiserver ---

func runClient(address string) {
	raw, err := net.Dial("tcp", address)
	check(err, "dial")
	// As kube-apiserver's stream translator does: pings keep flowing while the streams work.
	conn, err := streamspdy.NewClientConnectionWithPings(raw, 20*time.Millisecond)
	check(err, "SPDY client connection")

	open := func(scenario string, extra http.Header) httpstream.Stream {
		headers := http.Header{}
		for name, values := range extra {
			headers[name] = values
		}
		headers.Set("scenario", scenario)
		stream, err := conn.CreateStream(headers)
		check(err, "create stream "+scenario)
		return stream
	}

	// k8s's port-forward headers, canonicalised by net/http as kubectl and the apiserver set them.
	headers := http.Header{}
	headers.Set("streamType", "error")
	headers.Set("port", "8080")
	headers.Set("requestID", "1")
	stream := open("headers", headers)
	answer, err := io.ReadAll(stream)
	check(err, "read headers verdict")
	if string(answer) != "ok" {
		fail("the Python side saw other headers: %q", answer)
	}

	stream = open("echo", nil)
	for _, message := range []string{"hello", " ", "spdy"} {
		_, err = stream.Write([]byte(message))
		check(err, "echo write")
	}
	check(stream.Close(), "echo half-close")
	answer, err = io.ReadAll(stream)
	check(err, "echo read")
	if string(answer) != "hello spdy" {
		fail("echo returned %q", answer)
	}

	upload := pattern(bigSize)
	stream = open("sink", nil)
	check(writeAll(stream, upload), "upload")
	check(stream.Close(), "upload half-close")
	answer, err = io.ReadAll(stream)
	check(err, "upload verdict")
	if want := fmt.Sprintf("%d %s", len(upload), digest(upload)); string(answer) != want {
		fail("upload arrived as %q, want %q", answer, want)
	}

	stream = open("source", http.Header{"Size": {strconv.Itoa(bigSize)}})
	check(stream.Close(), "download half-close")
	download, err := io.ReadAll(stream)
	check(err, "download")
	if len(download) != bigSize || !bytes.Equal(download, pattern(bigSize)) {
		fail("download: %d bytes, digest %s; want %d bytes of the pattern", len(download), digest(download), bigSize)
	}

	var group sync.WaitGroup
	errs := make(chan error, concurrency)
	for i := range concurrency {
		group.Add(1)
		go func() {
			defer group.Done()
			message := bytes.Repeat([]byte{byte(i)}, 64<<10+i)
			stream := open("echo", nil)
			if err := writeAll(stream, message); err != nil {
				errs <- err
				return
			}
			if err := stream.Close(); err != nil {
				errs <- err
				return
			}
			echoed, err := io.ReadAll(stream)
			if err == nil && !bytes.Equal(echoed, message) {
				err = fmt.Errorf("stream %d echoed %d bytes, want %d", stream.Identifier(), len(echoed), len(message))
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	group.Wait()
	close(errs)
	for err := range errs {
		fail("concurrent echo: %v", err)
	}

	stream = open("reset-me", nil)
	read := make(chan error, 1)
	go func() { _, err := stream.Read(make([]byte, 1)); read <- err }()
	select {
	case err := <-read:
		if !errors.Is(err, io.EOF) {
			fail("reading a stream the server reset: %v, want EOF", err)
		}
	case <-time.After(10 * time.Second):
		fail("a stream the server reset still blocks its reader")
	}

	stream = open("client-resets", nil)
	_, err = stream.Write([]byte("about to reset"))
	check(err, "write before reset")
	check(stream.Reset(), "reset")

	stream = open("server-pings", nil)
	answer, err = io.ReadAll(stream)
	check(err, "server ping verdict")
	if string(answer) != "ok" {
		fail("the Python side's PING: %q", answer)
	}

	pingOverSpdystream(address)

	check(conn.Close(), "close") // RST for unfinished streams, then GOAWAY
	select {
	case <-conn.CloseChan():
	case <-time.After(10 * time.Second):
		fail("the Python side did not close the connection after GOAWAY")
	}
}

// pingOverSpdystream pings with spdystream directly: k8s's wrapper keeps Ping's result to itself.
func pingOverSpdystream(address string) {
	raw, err := net.Dial("tcp", address)
	check(err, "dial for ping")
	conn, err := spdystream.NewConnection(raw, false)
	check(err, "spdystream connection")
	go conn.Serve(spdystream.NoOpStreamHandler)
	for range 3 {
		_, err := conn.Ping()
		check(err, "ping")
	}
	check(conn.CloseWait(), "close the ping connection")
}

// --- server: the probe plays a kubelet, for catamaran's SPDY client side ---

func runServer() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	check(err, "listen")
	fmt.Printf("LISTENING %s\n", listener.Addr())
	raw, err := listener.Accept()
	check(err, "accept")
	failures := make(chan string, 100)
	conn, err := streamspdy.NewServerConnection(raw, func(stream httpstream.Stream, replySent <-chan struct{}) error {
		go func() {
			<-replySent // data sent before the reply would be dropped
			if problem := serve(stream); problem != "" {
				failures <- problem
			}
		}()
		return nil
	})
	check(err, "SPDY server connection")
	select {
	case <-conn.CloseChan():
	case <-time.After(80 * time.Second):
		fail("the Python client never closed the connection")
	}
	select {
	case problem := <-failures:
		fail("%s", problem)
	default:
	}
}

func serve(stream httpstream.Stream) string {
	headers := stream.Headers()
	switch scenario := headers.Get("scenario"); scenario {
	case "headers":
		fmt.Fprintf(stream, "%s %s", headers.Get("streamType"), headers.Get("port"))
	case "echo":
		if _, err := io.Copy(stream, stream); err != nil {
			return "echo: " + err.Error()
		}
	case "sink":
		received, err := io.ReadAll(stream)
		if err != nil {
			return "sink: " + err.Error()
		}
		fmt.Fprintf(stream, "%d %s", len(received), digest(received))
	case "source":
		size, _ := strconv.Atoi(headers.Get("size"))
		if err := writeAll(stream, pattern(size)); err != nil {
			return "source: " + err.Error()
		}
	case "reset-me":
		stream.Reset()
		return ""
	default:
		stream.Reset()
		return "unknown scenario " + scenario
	}
	stream.Close()
	return ""
}
