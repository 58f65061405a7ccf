package gpustack.neo4j;

import java.io.IOException;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.kernel.internal.Version;
import org.neo4j.server.CommunityBootstrapper;

import gpustack.neo4j.files.BrowserFiles;

/**
 * Starts a local Neo4j Community server (Bolt + HTTP + Neo4j Browser) in this JVM, using
 * Neo4j's own {@link CommunityBootstrapper} (the same code path as {@code neo4j console}).
 *
 * <pre>
 * java -Xmx1g --add-opens=... -cp 'target/classes:lib/*' gpustack.neo4j.Launcher \
 *      --data-dir DIR [--bolt-port 7687] [--http-port 7474] [--auth|--no-auth]
 *      [--password-env NAME | --password PW] [--pagecache 256m] [--browser-files DIR]
 *      [--set key=value ...]
 * </pre>
 *
 * DIR becomes the Neo4j home: databases in DIR/data, Neo4j's logs in DIR/logs, and an
 * optional DIR/conf/neo4j.conf is read (the options above win over it). Everything listens
 * on 127.0.0.1 only. With {@code --browser-files DIR} (which must hold {@code gpustack.grass} and
 * {@code guide.html}) the HTTP server also serves those two files at {@code /gpustack/}, and Browser
 * applies the style and plays the guide as soon as it connects. Once Bolt accepts connections one line starting with {@link #READY}
 * is printed on stdout. SIGTERM/SIGINT shut the DBMS down cleanly (the bootstrapper's
 * shutdown hook).
 */
public final class Launcher {
    public static final String READY = "NEO4J_LAUNCHER_READY";
    public static final String FAILED = "NEO4J_LAUNCHER_FAILED";
    private static final String LISTEN = "127.0.0.1";
    private static final String DEFAULT_PASSWORD_ENV = "NEO4J_LAUNCHER_PASSWORD";

    private Launcher() {}

    public static void main(String[] args) throws Exception {
        PrintStream out = System.out; // the bootstrapper may redirect System.out later
        Path dataDir = null;
        int boltPort = 7687;
        int httpPort = 7474;
        boolean auth = false;
        String password = null;
        String passwordEnv = DEFAULT_PASSWORD_ENV;
        String pagecache = "256m";
        Path browserFiles = null;
        Map<String, String> extra = new LinkedHashMap<>();

        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--data-dir" -> dataDir = Paths.get(value(args, ++i, a));
                case "--bolt-port" -> boltPort = port(value(args, ++i, a), a);
                case "--http-port" -> httpPort = port(value(args, ++i, a), a);
                case "--auth" -> auth = true;
                case "--no-auth" -> auth = false;
                case "--password" -> password = value(args, ++i, a);
                case "--password-env" -> passwordEnv = value(args, ++i, a);
                case "--pagecache" -> pagecache = value(args, ++i, a);
                case "--browser-files" -> browserFiles = Paths.get(value(args, ++i, a)).toAbsolutePath();
                case "--set" -> {
                    String kv = value(args, ++i, a);
                    int eq = kv.indexOf('=');
                    if (eq <= 0) {
                        fail(out, 2, "--set expects key=value, got: " + kv);
                    }
                    extra.put(kv.substring(0, eq).trim(), kv.substring(eq + 1).trim());
                }
                case "-h", "--help" -> {
                    out.println("usage: Launcher --data-dir DIR [--bolt-port 7687] [--http-port 7474 (0 = off)]"
                            + " [--auth|--no-auth] [--password-env NAME | --password PW]"
                            + " [--pagecache 256m] [--browser-files DIR] [--set neo4j.setting=value]...");
                    return;
                }
                default -> fail(out, 2, "unknown argument: " + a);
            }
        }
        if (dataDir == null) {
            fail(out, 2, "--data-dir is required");
        }
        if (password == null && passwordEnv != null && !passwordEnv.isEmpty()) {
            String env = System.getenv(passwordEnv);
            if (env != null && !env.isEmpty()) {
                password = env;
            }
        }

        Path home = dataDir.toAbsolutePath().normalize();
        Files.createDirectories(home);

        Map<String, String> cfg = new LinkedHashMap<>();
        cfg.put("server.default_listen_address", LISTEN);
        cfg.put("server.default_advertised_address", LISTEN);
        cfg.put("server.bolt.enabled", "true");
        cfg.put("server.bolt.listen_address", LISTEN + ":" + boltPort);
        cfg.put("server.bolt.advertised_address", LISTEN + ":" + boltPort);
        cfg.put("server.bolt.tls_level", "DISABLED");
        cfg.put("server.http.enabled", Boolean.toString(httpPort > 0));
        if (httpPort > 0) {
            cfg.put("server.http.listen_address", LISTEN + ":" + httpPort);
            cfg.put("server.http.advertised_address", LISTEN + ":" + httpPort);
        }
        cfg.put("server.https.enabled", "false");
        cfg.put("dbms.security.auth_enabled", Boolean.toString(auth));
        cfg.put("server.memory.pagecache.size", pagecache);
        // Keep the disk footprint of a dev/test server small.
        cfg.put("db.tx_log.rotation.retention_policy", "256M size");
        cfg.put("dbms.usage_report.enabled", "false");
        // Netty's graceful shutdown waits a 5 s quiet period per event loop group (~10 s
        // per stop); a local server has nothing to drain, so stop promptly.
        cfg.put("internal.dbms.bolt.netty_server_shutdown_quiet_period", "0");
        cfg.put("internal.dbms.bolt.netty_server_shutdown_timeout", "5s");
        if (browserFiles != null && httpPort > 0) {
            System.setProperty(BrowserFiles.FOLDER, browserFiles.toString());
            String files = "http://" + LISTEN + ":" + httpPort + "/gpustack/";
            cfg.put("server.unmanaged_extension_classes", "gpustack.neo4j.files=/gpustack");
            // Browser fetches them without credentials, also when auth is on; they are public files.
            cfg.put("dbms.security.http_auth_allowlist", "/,/browser.*,/gpustack/.*");
            cfg.put("browser.remote_content_hostname_whitelist", LISTEN + ",localhost,guides.neo4j.com");
            cfg.put("browser.post_connect_cmd", "style " + files + "gpustack.grass; play " + files + "guide.html");
        }
        cfg.putAll(extra);

        Path confFile = home.resolve("conf").resolve("neo4j.conf");
        CommunityBootstrapper bootstrapper = new CommunityBootstrapper();
        int rc;
        try {
            rc = bootstrapper.start(home, Files.isRegularFile(confFile) ? confFile : null, cfg, false, false);
        } catch (Throwable e) {
            e.printStackTrace(out);
            fail(out, 1, "Neo4j failed to start: " + oneLine(e));
            return;
        }
        if (rc != 0) {
            fail(out, rc, "Neo4j failed to start (exit code " + rc + "); see the ERROR lines above and "
                    + home.resolve("logs").resolve("neo4j.log"));
        }

        DatabaseManagementService dbms = bootstrapper.getDatabaseManagementService();
        if (auth && password != null) {
            try {
                GraphDatabaseService system = dbms.database("system");
                system.executeTransactionally(
                        "ALTER USER neo4j SET PASSWORD $pw CHANGE NOT REQUIRED", Map.of("pw", password));
            } catch (Exception e) {
                bootstrapper.stop();
                fail(out, 3, "could not set the password of user neo4j: " + oneLine(e));
            }
        }

        long deadline = System.nanoTime() + 60_000_000_000L;
        while (!canConnect(boltPort)) {
            if (System.nanoTime() > deadline) {
                bootstrapper.stop();
                fail(out, 4, "Bolt did not accept connections on " + LISTEN + ":" + boltPort);
            }
            Thread.sleep(100);
        }

        out.println(READY + " version=" + Version.getNeo4jVersion()
                + " bolt=bolt://" + LISTEN + ":" + boltPort
                + " http=" + (httpPort > 0 ? "http://" + LISTEN + ":" + httpPort : "off")
                + " auth=" + auth
                + " home=" + home
                + " pid=" + ProcessHandle.current().pid());
        out.flush();

        // The bootstrapper's shutdown hook stops the DBMS on SIGTERM/SIGINT; Neo4j's
        // non-daemon threads keep the JVM alive until then. Park the main thread.
        new CountDownLatch(1).await();
    }

    private static boolean canConnect(int port) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(LISTEN, port), 500);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private static String value(String[] args, int i, String flag) {
        if (i >= args.length) {
            fail(System.out, 2, flag + " needs a value");
        }
        return args[i];
    }

    private static int port(String v, String flag) {
        try {
            int p = Integer.parseInt(v);
            if (p < 0 || p > 65535) {
                throw new NumberFormatException();
            }
            return p;
        } catch (NumberFormatException e) {
            fail(System.out, 2, flag + " expects a port number, got: " + v);
            return -1;
        }
    }

    private static String oneLine(Throwable e) {
        String m = e.getMessage() == null ? e.getClass().getName() : e.getMessage();
        m = m.replace('\n', ' ').replace('\r', ' ');
        return m.length() > 500 ? m.substring(0, 500) + "..." : m;
    }

    private static void fail(PrintStream out, int code, String message) {
        out.println(FAILED + " " + message);
        out.flush();
        System.exit(code);
    }
}
