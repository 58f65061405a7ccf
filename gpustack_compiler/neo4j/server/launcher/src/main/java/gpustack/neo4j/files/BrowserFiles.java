package gpustack.neo4j.files;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.regex.Pattern;

import javax.ws.rs.GET;
import javax.ws.rs.Path;
import javax.ws.rs.PathParam;
import javax.ws.rs.core.Response;

/**
 * Serves the Browser style and guide (an unmanaged extension mounted at {@code /gpustack}) from the
 * folder named by the system property {@link #FOLDER}, so that Browser's {@code :style URL} and
 * {@code :play URL} load them from the server's own origin. Only plain names ending in
 * {@code .html} or {@code .grass} directly in that folder are served; anything else is 404.
 */
@Path("/")
public final class BrowserFiles {
    public static final String FOLDER = "gpustack.browser.files";
    private static final Pattern NAME = Pattern.compile("[a-z0-9_-]+\\.(html|grass)");

    @GET
    @Path("{file}")
    public Response file(@PathParam("file") String file) throws IOException {
        String folder = System.getProperty(FOLDER);
        if (folder == null || !NAME.matcher(file).matches()) {
            return Response.status(Response.Status.NOT_FOUND).build();
        }
        java.nio.file.Path path = Paths.get(folder).resolve(file);
        if (!Files.isRegularFile(path)) {
            return Response.status(Response.Status.NOT_FOUND).build();
        }
        String type = file.endsWith(".html") ? "text/html; charset=utf-8" : "text/plain; charset=utf-8";
        return Response.ok(Files.readAllBytes(path), type).header("Cache-Control", "no-store").build();
    }
}
