//! The report as a browser shows it: `vrampool report` on the bundled traces, the page opened in headless
//! Chromium, its screenshot decoded and checked for the charts' colours, and its rendered DOM checked for
//! the charts and the sections.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The screenshot's size in CSS pixels.
const WINDOW: (u32, u32) = (1400, 4000);

/// The allocators' colours in the page's stylesheet: fixed, dynamic, hybrid, PyTorch.
const ALLOCATOR_COLOURS: [(&str, [u8; 3]); 5] = [
    ("fixed", [0xd9, 0x59, 0x0b]),
    ("dynamic", [0x1b, 0x8a, 0x5a]),
    ("hybrid", [0x6a, 0x51, 0xa3]),
    ("adaptive", [0xb8, 0x33, 0x6a]),
    ("pytorch", [0x2b, 0x6c, 0xb0]),
];

/// A folder under the system's temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!("vrampool-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).expect("the temporary folder can be made");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var_os("CHROMIUM").unwrap_or_else(|| "/usr/bin/chromium".into()));
    assert!(path.exists(), "{} is missing: apt-get install -y chromium", path.display());
    path
}

/// Runs headless Chromium on `page` with `extra` arguments, in a fresh profile, and returns its standard
/// output; fails the test after two minutes.
fn run_chromium(page: &Path, extra: &[String], profile: &Path) -> Vec<u8> {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).map(|_| out)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("chromium can be waited on") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("chromium ran for more than 120 s on {}", page.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "chromium failed: {status}");
    reader.join().expect("the reader thread ends").expect("chromium's output can be read")
}

/// A decoded PNG: width, height and 8-bit RGB pixels.
struct Image {
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

/// Decodes an 8-bit, non-interlaced RGB or RGBA PNG, as Chromium writes its screenshots. (Written here
/// for the test: the workspace has `flate2` for the inflating but no PNG decoder among its dependencies.)
fn decode_png(bytes: &[u8]) -> Image {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG: {:?}", &bytes[..bytes.len().min(8)]);
    let (mut width, mut height, mut channels) = (0usize, 0usize, 0usize);
    let mut data = Vec::new();
    let mut at = 8;
    while at + 12 <= bytes.len() {
        let length = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let body = &bytes[at + 8..at + 8 + length];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
                let (depth, colour, interlace) = (body[8], body[9], body[12]);
                assert_eq!((depth, interlace), (8, 0), "8-bit, not interlaced");
                channels = match colour {
                    2 => 3,
                    6 => 4,
                    other => panic!("PNG colour type {other} is not RGB or RGBA"),
                };
            }
            b"IDAT" => data.extend_from_slice(body),
            b"IEND" => break,
            _ => {}
        }
        at += 12 + length;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&data[..]).read_to_end(&mut raw).expect("the image data inflates");
    let stride = width * channels;
    assert_eq!(raw.len(), height * (stride + 1), "one filter byte and {stride} bytes per row");
    let mut pixels = vec![0u8; height * stride];
    for row in 0..height {
        let filter = raw[row * (stride + 1)];
        let line = &raw[row * (stride + 1) + 1..(row + 1) * (stride + 1)];
        for i in 0..stride {
            let left = if i >= channels { pixels[row * stride + i - channels] } else { 0 };
            let up = if row > 0 { pixels[(row - 1) * stride + i] } else { 0 };
            let up_left = if row > 0 && i >= channels { pixels[(row - 1) * stride + i - channels] } else { 0 };
            let predicted = match filter {
                0 => 0,
                1 => left,
                2 => up,
                3 => ((u16::from(left) + u16::from(up)) / 2) as u8,
                4 => {
                    let p = i16::from(left) + i16::from(up) - i16::from(up_left);
                    let (pa, pb, pc) =
                        ((p - i16::from(left)).abs(), (p - i16::from(up)).abs(), (p - i16::from(up_left)).abs());
                    if pa <= pb && pa <= pc {
                        left
                    } else if pb <= pc {
                        up
                    } else {
                        up_left
                    }
                }
                other => panic!("PNG filter {other} on row {row}"),
            };
            pixels[row * stride + i] = line[i].wrapping_add(predicted);
        }
    }
    let rgb = pixels.chunks_exact(channels).flat_map(|p| [p[0], p[1], p[2]]).collect();
    Image { width, height, rgb }
}

impl Image {
    /// Pixels within `tolerance` of `colour` on every channel.
    fn count_near(&self, colour: [u8; 3], tolerance: u8) -> usize {
        self.rgb.chunks_exact(3).filter(|p| (0..3).all(|c| p[c].abs_diff(colour[c]) <= tolerance)).count()
    }

    /// Distinct colours.
    fn colours(&self) -> usize {
        let mut seen: Vec<u32> = self.rgb.chunks_exact(3).map(|p| u32::from_be_bytes([0, p[0], p[1], p[2]])).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }
}

fn bundled_traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces");
    let mut traces: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".pickle.gz"))
        .collect();
    traces.sort();
    assert!(!traces.is_empty(), "no bundled traces in {}", dir.display());
    traces
}

#[test]
#[ignore = "needs headless Chromium; .ci/run installs it and runs this test"]
fn the_report_renders_in_a_browser() {
    let dir = TempDir::new("report");
    let page = dir.0.join("report.html");
    let traces = bundled_traces();
    let output = Command::new(env!("CARGO_BIN_EXE_vrampool"))
        .arg("report")
        .args(&traces)
        .arg("-o")
        .arg(&page)
        .output()
        .expect("vrampool runs");
    assert!(output.status.success(), "vrampool report failed: {}", String::from_utf8_lossy(&output.stderr));
    let html = std::fs::read_to_string(&page).expect("the report was written");
    assert!(html.len() < 1 << 20, "the page stays small: {} bytes", html.len());
    assert!(!html.contains("http"), "the page fetches nothing");
    assert!(!html.to_lowercase().contains("<script"), "the page has no script");

    let shot = dir.0.join("report.png");
    run_chromium(
        &page,
        &[format!("--screenshot={}", shot.display()), format!("--window-size={},{}", WINDOW.0, WINDOW.1)],
        &TempDir::new("chromium-profile").0,
    );
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(png.len() > 100_000, "a screenshot of charts is not that small: {} bytes", png.len());
    let image = decode_png(&png);
    assert_eq!((image.width, image.height), (WINDOW.0 as usize, WINDOW.1 as usize));
    assert!(image.colours() > 1000, "not a blank page: {} colours", image.colours());
    for (allocator, colour) in ALLOCATOR_COLOURS {
        let pixels = image.count_near(colour, 6);
        assert!(pixels > 200, "the {allocator} colour {colour:02x?} shows on {pixels} pixels only");
    }

    let dom = run_chromium(&page, &["--dump-dom".into()], &TempDir::new("chromium-profile").0);
    let dom = String::from_utf8(dom).expect("the DOM is text");
    let svgs = dom.matches("<svg").count();
    // Per trace: five memory panels (the default's among them), the size histogram, four diagrams.
    assert_eq!(svgs, traces.len() * 10, "SVG pictures in the rendered page");
    for trace in &traces {
        let name = trace.file_name().unwrap().to_string_lossy();
        assert!(dom.contains(&format!("<h2>{name}</h2>")), "a section for {name}");
    }
    assert_eq!(dom.matches("Recommended: <strong>").count(), traces.len());
    assert_eq!(dom.matches("<table class=\"comparison\">").count(), traces.len());
}
