//! Pictures for the tests of content a tool returns: real PNG files (the `png` crate), one a
//! person recognises in a screenshot and one too large to keep, each the same for the same seed.

/// A `width`×`height` PNG: a blue disc on a yellow ground, with a red band across its top, so a
/// screenshot shows at a glance that the picture, and not a placeholder, is drawn.
pub fn disc(width: u32, height: u32) -> Vec<u8> {
    let (cx, cy, r) = (width as f64 / 2.0, height as f64 / 2.0, width.min(height) as f64 / 3.0);
    let mut pixels = Vec::with_capacity((width * height * 3) as usize);
    for y in 0..height {
        for x in 0..width {
            let (dx, dy) = (x as f64 + 0.5 - cx, y as f64 + 0.5 - cy);
            let rgb = if y < height / 8 {
                [220, 30, 30]
            } else if dx * dx + dy * dy <= r * r {
                [30, 60, 220]
            } else {
                [250, 220, 40]
            };
            pixels.extend_from_slice(&rgb);
        }
    }
    encode(width, height, &pixels)
}

/// A `width`×`height` PNG of noise, which no compression makes smaller: about three bytes a pixel.
pub fn noise(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let pixels: Vec<u8> = (0..width * height * 3)
        .map(|_| {
            // xorshift64: the same bytes for the same seed, without a generator crate's version.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    encode(width, height, &pixels)
}

fn encode(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().expect("a PNG header");
    writer.write_image_data(rgb).expect("PNG data");
    writer.finish().expect("a PNG");
    out
}
