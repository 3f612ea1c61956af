package main

import (
	"io"
	"log"
	"net"
	"runtime"
	"syscall"
)

// The two byte pipes below parse no HTTP: each client connection gets a
// connection of its own to the worker, and bytes are copied both ways as
// they arrive. They are not proxies a user would deploy (no header is
// looked at, a worker's idle close ends the client's connection); they
// split the Go floor's cost into what HTTP handling adds (h1 against
// -pipe) and what Go's network poller and scheduler add (-pipe against
// -epoll, which keeps the runtime off the path, and against nginx).

// servePipe copies bytes between each client and its worker connection
// with two goroutines on the net package, as any Go proxy's relay does.
func servePipe(listen, to string) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", to)
			if err != nil {
				log.Printf("goproxy: dial %s: %v", to, err)
				return
			}
			defer u.Close()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
			_, _ = io.Copy(u, c)
		}()
	}
}

// serveEpoll copies the same bytes from one OS thread with epoll and raw
// system calls, the way an event-loop proxy such as nginx does: no
// goroutine parks or wakes on the path.
func serveEpoll(listen, to string) {
	runtime.LockOSThread()
	lnAddr, err := net.ResolveTCPAddr("tcp4", listen)
	check(err)
	upAddr, err := net.ResolveTCPAddr("tcp4", to)
	check(err)
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	check(err)
	check(syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1))
	check(syscall.Bind(lfd, sockaddr(lnAddr)))
	check(syscall.Listen(lfd, 512))
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	check(err)
	add := func(fd int) {
		check(syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}))
	}
	add(lfd)
	peer := map[int]int{}
	closePair := func(fd int) {
		p := peer[fd]
		delete(peer, fd)
		delete(peer, p)
		syscall.Close(fd)
		syscall.Close(p)
	}
	buf := make([]byte, 64<<10)
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(ep, events, -1)
		if err == syscall.EINTR {
			continue
		}
		check(err)
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				cfd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
				if err != nil {
					continue
				}
				ufd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
				if err == nil {
					err = syscall.Connect(ufd, sockaddr(upAddr)) // blocking: once per connection
				}
				if err != nil {
					log.Printf("goproxy: connect %s: %v", to, err)
					syscall.Close(cfd)
					continue
				}
				check(syscall.SetNonblock(ufd, true))
				for _, f := range []int{cfd, ufd} {
					_ = syscall.SetsockoptInt(f, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
					add(f)
				}
				peer[cfd], peer[ufd] = ufd, cfd
				continue
			}
			p, ok := peer[fd]
			if !ok {
				continue
			}
			r, err := syscall.Read(fd, buf)
			if err == syscall.EAGAIN {
				continue
			}
			if r <= 0 {
				closePair(fd)
				continue
			}
			if !writeAll(p, buf[:r]) {
				closePair(fd)
			}
		}
	}
}

// writeAll writes b to a non-blocking socket, waiting on it when its send
// buffer is full (the answers here are small; this is rare).
func writeAll(fd int, b []byte) bool {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EAGAIN {
			var w syscall.FdSet
			w.Bits[fd/64] |= 1 << (uint(fd) % 64)
			_, _ = syscall.Select(fd+1, nil, &w, nil, nil)
			continue
		}
		if err != nil || n <= 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

func sockaddr(a *net.TCPAddr) *syscall.SockaddrInet4 {
	sa := &syscall.SockaddrInet4{Port: a.Port}
	copy(sa.Addr[:], a.IP.To4())
	return sa
}

func check(err error) {
	if err != nil {
		log.Fatal("goproxy: ", err)
	}
}
