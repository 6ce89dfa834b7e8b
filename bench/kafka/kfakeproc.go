package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cohortlabs/cohort/bench/report"
)

// kfake in a process of its own (--kfake process): the bench runs itself
// again as `kafka-bench kfake-serve`, which starts the cluster, prints
// its listen addresses on one line and serves until its standard input
// closes (the bench ended, however it ended) or it is told to stop. Then
// kfake, like cohortd, answers from another process than the clients',
// through the kernel and a scheduler of its own.

// kfakeServeCommand is the hidden first argument that runs kfake-serve.
const kfakeServeCommand = "kfake-serve"

// startKfake starts kfake with the given brokers, telling KIP-848 members
// consumerHB as their heartbeat interval.
func startKfake(brokers int, consumerHB time.Duration) (*kfake.Cluster, error) {
	return kfake.NewCluster(kfake.NumBrokers(brokers), kfake.BrokerConfigs(map[string]string{
		"group.consumer.heartbeat.interval.ms": strconv.FormatInt(consumerHB.Milliseconds(), 10),
	}))
}

// kfakeServe is `kafka-bench kfake-serve --brokers N --consumer-heartbeat D`.
func kfakeServe(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet(kfakeServeCommand, flag.ContinueOnError)
	brokers := fs.Int("brokers", 1, "brokers of the kfake cluster")
	consumerHB := fs.Duration("consumer-heartbeat", 5*time.Second, "group.consumer.heartbeat.interval.ms")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fake, err := startKfake(*brokers, *consumerHB)
	if err != nil {
		return err
	}
	defer fake.Close()
	if _, err := fmt.Fprintln(stdout, strings.Join(fake.ListenAddrs(), ",")); err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(closed)
	}()
	select {
	case <-stop:
	case <-closed:
	}
	return nil
}

// startKfakeProcess runs kfake-serve and returns its target.
func startKfakeProcess(ctx context.Context, o options) (*target, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, kfakeServeCommand, "--brokers", strconv.Itoa(o.kfakeBrokers), "--consumer-heartbeat", o.consumerHB.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stopProc := func() {
		_ = stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var addrs string
	why := "exited without them (its error is on standard error above)"
	select {
	case addrs = <-line:
	case <-time.After(30 * time.Second):
		why = "did not print them within 30s"
	case <-ctx.Done():
		why = "was not waited for: " + ctx.Err().Error()
	}
	if addrs == "" {
		stopProc()
		return nil, fmt.Errorf("%s %s: no listen addresses: it %s; --kfake inprocess runs kfake without a process of its own", self, kfakeServeCommand, why)
	}
	pid := cmd.Process.Pid
	return &target{
		name:  "kfake",
		seeds: strings.Split(addrs, ","),
		about: fmt.Sprintf("%d broker(s) on loopback, in memory, unreplicated, in a process of its own", o.kfakeBrokers),
		cpu:   func() time.Duration { return report.ProcessCPU() + report.PidCPU(pid) },
		close: stopProc,
	}, nil
}
