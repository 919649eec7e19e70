// Apache Curator's InterProcessMutex, driven from the command line: the peer
// in bench/zookeeper_bench.cc and the other side of the interoperability test
// (tests/cli/zookeeper_test.sh). Debian's libcurator-recipes-java; compile
// with javac -cp "$(bench/peers/curator-classpath.sh)".
//
//   CuratorLock hold   ZK_URI PATH HOLD_MS LOG   acquire, append "start curator" and
//                                                "end curator" to LOG around HOLD_MS
//   CuratorLock worker ZK_URI PATH SECONDS HOLD_MS OUT
//                                                acquire/hold/release until SECONDS pass;
//                                                OUT gets "started_ns acquired_ns released_ns"
//                                                (CLOCK_MONOTONIC, as System.nanoTime)
//   CuratorLock cycle  ZK_URI PATH N             N uncontended acquire+release cycles and
//                                                N raw ephemeral create+delete; prints
//                                                "cycle_us FLOAT floor_us FLOAT" (means)
//
// ZK_URI is dlock's zk://[user[:password]@]h1:p1,h2:p2/chroot[?password_file=F];
// the chroot becomes Curator's namespace, so PATH is the same path a dlock
// key names, and the credentials become Curator's digest authorization.
import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.CreateMode;

public final class CuratorLock {
  private static CuratorFramework connect(String uri) throws Exception {
    String rest = uri.startsWith("zk://") ? uri.substring(5) : uri;
    String query = "";
    int question = rest.indexOf('?');
    if (question >= 0) {
      query = rest.substring(question + 1);
      rest = rest.substring(0, question);
    }
    String userInfo = "";
    int at = rest.lastIndexOf('@');
    if (at >= 0) {
      userInfo = rest.substring(0, at);
      rest = rest.substring(at + 1);
    }
    for (String param : query.split("&")) {
      if (param.startsWith("password_file=")) {
        String file = param.substring("password_file=".length());
        userInfo += ":" + Files.readAllLines(Paths.get(file)).get(0);
      }
    }
    int slash = rest.indexOf('/');
    String hosts = slash < 0 ? rest : rest.substring(0, slash);
    String chroot = slash < 0 ? "" : rest.substring(slash + 1);
    CuratorFrameworkFactory.Builder b = CuratorFrameworkFactory.builder()
        .connectString(hosts).sessionTimeoutMs(10000).connectionTimeoutMs(10000)
        .retryPolicy(new RetryNTimes(100, 50));
    if (!chroot.isEmpty()) b = b.namespace(chroot);
    if (!userInfo.isEmpty()) b = b.authorization("digest", userInfo.getBytes(StandardCharsets.UTF_8));
    CuratorFramework client = b.build();
    client.start();
    if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) throw new IllegalStateException("no connection");
    return client;
  }

  private static void append(String log, String line) throws Exception {
    try (PrintWriter w = new PrintWriter(new FileWriter(log, true))) {
      w.println(line);
    }
  }

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    CuratorFramework client = connect(args[1]);
    String path = args[2];
    InterProcessMutex mutex = new InterProcessMutex(client, path);
    switch (mode) {
      case "hold": {
        long holdMs = Long.parseLong(args[3]);
        mutex.acquire();
        append(args[4], "start curator");
        System.out.println("acquired");
        System.out.flush();
        Thread.sleep(holdMs);
        append(args[4], "end curator");
        mutex.release();
        break;
      }
      case "worker": {
        long end = System.nanoTime() + Long.parseLong(args[3]) * 1_000_000_000L;
        long holdNs = Long.parseLong(args[4]) * 1_000_000L;
        List<long[]> out = new ArrayList<>();
        while (System.nanoTime() < end) {
          long started = System.nanoTime();
          mutex.acquire();
          long acquired = System.nanoTime();
          Thread.sleep(holdNs / 1_000_000L, (int) (holdNs % 1_000_000L));
          long released = System.nanoTime();
          mutex.release();
          out.add(new long[] {started, acquired, released});
        }
        try (PrintWriter w = new PrintWriter(new FileWriter(args[5]))) {
          for (long[] r : out) w.println(r[0] + " " + r[1] + " " + r[2]);
        }
        break;
      }
      case "cycle": {
        int n = Integer.parseInt(args[3]);
        for (int i = 0; i < n / 10 + 10; ++i) { mutex.acquire(); mutex.release(); }  // warm-up
        long t0 = System.nanoTime();
        for (int i = 0; i < n; ++i) { mutex.acquire(); mutex.release(); }
        long t1 = System.nanoTime();
        String floorPath = path + "-floor";
        client.create().creatingParentContainersIfNeeded().withMode(CreateMode.EPHEMERAL).forPath(floorPath);
        client.delete().forPath(floorPath);
        long t2 = System.nanoTime();
        for (int i = 0; i < n; ++i) {
          client.create().withMode(CreateMode.EPHEMERAL).forPath(floorPath);
          client.delete().forPath(floorPath);
        }
        long t3 = System.nanoTime();
        System.out.printf("cycle_us %.1f floor_us %.1f%n", (t1 - t0) / 1e3 / n, (t3 - t2) / 1e3 / n);
        break;
      }
      default:
        throw new IllegalArgumentException("unknown mode " + mode);
    }
    client.close();
  }
}
